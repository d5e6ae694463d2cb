#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL(wgrad_fp16_to_fp32_coop256x128, kWgrad, cutlass::half_t, float, Coop256x128)
