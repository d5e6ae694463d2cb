#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL(wgrad_fp16_coop256x128, kWgrad, cutlass::half_t, cutlass::half_t, Coop256x128)
