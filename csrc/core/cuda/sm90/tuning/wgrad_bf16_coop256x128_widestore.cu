#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL(wgrad_bf16_coop256x128_widestore, kWgrad, cutlass::bfloat16_t, cutlass::bfloat16_t,
               WideStoreConfig<Coop256x128>)
