#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL(dgrad_bf16_coop128x256, kDgrad, cutlass::bfloat16_t, cutlass::bfloat16_t,
               Coop128x256)
