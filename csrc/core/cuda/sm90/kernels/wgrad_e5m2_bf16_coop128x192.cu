#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_coop128x192, kWgrad, cutlass::float_e5m2_t, cutlass::float_e4m3_t,
                  cutlass::bfloat16_t, Fp8Coop128x192)
