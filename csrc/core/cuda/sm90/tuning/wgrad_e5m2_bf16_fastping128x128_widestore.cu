#include "core/cuda/sm90/kernel_configs.cuh"

// The fast FP8 wgrad on a 128x128 pingpong tile with the wide store: each
// warpgroup owns a tile, so one's store overlaps the other's MMAs, where the
// cooperative kernels' warpgroups both wait for their shared tile's store.
GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_fastping128x128_widestore, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, WideStoreConfig<Fp8FastPing128x128>)
