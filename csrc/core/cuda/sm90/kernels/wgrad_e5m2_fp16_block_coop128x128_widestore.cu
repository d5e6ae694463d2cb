#include "core/cuda/sm90/kernel_configs.cuh"

// wgrad_e5m2_bf16_block_coop128x128_widestore with an fp16 output, for fp16 weights.
GL_SM90_KERNEL_AB(wgrad_e5m2_fp16_block_coop128x128_widestore, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::half_t, WideStoreConfig<Fp8BlockCoop128x128>)
