#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL(wgrad_bf16_to_fp32_coop256x128, kWgrad, cutlass::bfloat16_t, float, Coop256x128)
