#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL(dgrad_bf16_ping128x128, kDgrad, cutlass::bfloat16_t, cutlass::bfloat16_t,
               Ping128x128)
