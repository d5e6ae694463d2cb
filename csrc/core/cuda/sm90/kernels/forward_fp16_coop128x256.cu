#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL(forward_fp16_coop128x256, kForward, cutlass::half_t, cutlass::half_t, Coop128x256)
