#include "core/cuda/sm90/kernel_configs.cuh"

// The production promoting E5M2 wgrad (128x192) with the wide-store epilogue:
// one 128x192 store a tile, two tiles' stores in flight, no C operand. The
// 128x128 version gained nothing (commit d9da9a1); this measures the wider
// tile, whose store per tile is 1.5 times larger.
GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_coop128x192_widestore, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, WideStoreConfig<Fp8Coop128x192>)
