#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL_AB(wgrad_e5m2_to_fp32_coop128x192, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, float, Fp8Coop128x192)
