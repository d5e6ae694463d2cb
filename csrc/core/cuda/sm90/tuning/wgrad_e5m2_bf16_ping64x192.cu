#include "core/cuda/sm90/kernel_configs.cuh"

// Promoting E5M2 wgrad on 64x192 pingpong tiles: each consumer warpgroup owns
// a whole tile, so one's epilogue stores overlap the other's MMAs (the
// cooperative 128x192 kernel stores while both warpgroups wait). Defined
// here, not in kernel_configs.cuh, while it is a candidate.
namespace grouped_linear::cuda::sm90 {
using Fp8Ping64x192 = TileConfig<64, 192, 128, 1, false>;
}

GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_ping64x192, kWgrad, cutlass::float_e5m2_t, cutlass::float_e4m3_t,
                  cutlass::bfloat16_t, Fp8Ping64x192)
