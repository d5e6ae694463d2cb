#include "core/cuda/sm90/kernel_configs.cuh"

// Candidate: the fast-accumulation E4M3 forward on 128x128 pingpong tiles,
// each warpgroup owning a tile, so that one warpgroup's store runs beside
// the other's MMAs. An FP8 tile's MMAs take half a bf16 tile's time, so at
// 32-128 experts, where K is short (qwen3 fc2: 6 k-tiles a tile), the
// cooperative kernel's store, which both warpgroups wait for, is a larger
// part of each tile than it was for bf16 (whose 128x128 pingpong lost to
// 128x256 cooperative, benchmarks/h200-2026-12-02-tune-sm90.json).
namespace grouped_linear::cuda::sm90 {
using Fp8FastPing128x128 = Fp8FastAccumTileConfig<128, 128, false>;
}

GL_SM90_KERNEL_AB(forward_e4m3_bf16_fastping128x128, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8FastPing128x128)
