#include "core/cuda/sm90/kernel_configs.cuh"

// dgrad_e4m3_bf16_block_coop128x128 with an fp32 output, for layers whose activations are fp32.
GL_SM90_KERNEL_AB(dgrad_e4m3_fp32_block_coop128x128, kDgrad, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, float, Fp8BlockCoop128x128)
