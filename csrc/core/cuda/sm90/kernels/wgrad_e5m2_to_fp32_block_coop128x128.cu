#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL_AB(wgrad_e5m2_to_fp32_block_coop128x128, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, float, Fp8BlockCoop128x128)
