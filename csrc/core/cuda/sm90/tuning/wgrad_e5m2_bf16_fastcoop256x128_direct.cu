#include "core/cuda/sm90/direct_store_epilogue.cuh"
#include "core/cuda/sm90/kernel_configs.cuh"

// The fast-accumulation E5M2 wgrad on 256x128 tiles with the direct store.
GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_fastcoop256x128_direct, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, DirectStoreConfig<Fp8FastCoop256x128>)
