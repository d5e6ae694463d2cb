#include "core/cuda/sm90/kernel_configs.cuh"

// dgrad_e5m2_bf16_block_coop128x128 with an fp16 output, for layers whose activations are fp16.
GL_SM90_KERNEL_AB(dgrad_e5m2_fp16_block_coop128x128, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::half_t, Fp8BlockCoop128x128)
