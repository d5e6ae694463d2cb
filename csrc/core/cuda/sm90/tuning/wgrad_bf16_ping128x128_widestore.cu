#include "core/cuda/sm90/kernel_configs.cuh"

// The bf16 wgrad on a 128x128 pingpong tile with the wide store: one
// warpgroup's store overlaps the other's MMAs.
GL_SM90_KERNEL(wgrad_bf16_ping128x128_widestore, kWgrad, cutlass::bfloat16_t, cutlass::bfloat16_t,
               WideStoreConfig<Ping128x128>)
