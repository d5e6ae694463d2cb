#include "core/cuda/sm90/kernel_configs.cuh"

// forward_e4m3_bf16_block_coop128x128 with an fp16 output, for layers whose activations are fp16.
GL_SM90_KERNEL_AB(forward_e4m3_fp16_block_coop128x128, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::half_t, Fp8BlockCoop128x128)
