#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL_AB(dgrad_e5m2_bf16_fastcoop128x256, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8FastCoop128x256)
