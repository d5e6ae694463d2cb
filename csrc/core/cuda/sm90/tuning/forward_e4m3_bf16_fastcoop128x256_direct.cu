#include "core/cuda/sm90/direct_store_epilogue.cuh"
#include "core/cuda/sm90/kernel_configs.cuh"

// The fast-accumulation E4M3 forward (the recipes' default forward) with the
// direct store.
GL_SM90_KERNEL(forward_e4m3_bf16_fastcoop128x256_direct, kForward, cutlass::float_e4m3_t,
               cutlass::bfloat16_t, DirectStoreConfig<Fp8FastCoop128x256>)
