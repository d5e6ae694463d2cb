#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL(dgrad_fp16_ping64x256, kDgrad, cutlass::half_t, cutlass::half_t, Ping64x256)
