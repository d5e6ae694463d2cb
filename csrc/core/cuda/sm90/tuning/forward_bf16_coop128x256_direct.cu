#include "core/cuda/sm90/direct_store_epilogue.cuh"
#include "core/cuda/sm90/kernel_configs.cuh"

// bf16's forward with the direct store.
GL_SM90_KERNEL(forward_bf16_coop128x256_direct, kForward, cutlass::bfloat16_t, cutlass::bfloat16_t,
               DirectStoreConfig<Coop128x256>)
