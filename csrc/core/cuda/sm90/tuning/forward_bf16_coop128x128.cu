#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL(forward_bf16_coop128x128, kForward, cutlass::bfloat16_t, cutlass::bfloat16_t,
               Coop128x128)
