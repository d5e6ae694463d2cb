#include "core/cuda/sm90/direct_store_epilogue.cuh"
#include "core/cuda/sm90/kernel_configs.cuh"

// bf16's short-reduction wgrad tile with the direct store.
GL_SM90_KERNEL(wgrad_bf16_coop256x128_direct, kWgrad, cutlass::bfloat16_t, cutlass::bfloat16_t,
               DirectStoreConfig<Coop256x128>)
