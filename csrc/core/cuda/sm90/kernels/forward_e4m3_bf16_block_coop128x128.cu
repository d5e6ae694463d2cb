#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL_AB(forward_e4m3_bf16_block_coop128x128, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8BlockCoop128x128)
