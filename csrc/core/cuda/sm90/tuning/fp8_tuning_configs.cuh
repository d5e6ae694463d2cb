// Tile configurations of the FP8 tuning candidates (GL_SM90_TUNING builds
// only; kept out of kernel_configs.cuh so that the production kernels do
// not depend on them).
#pragma once

#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {

// Fast accumulation: the tensor core's own accumulation throughout, with no
// promotion of each k-block's partial sums into a second fp32 accumulator
// (Transformer Engine's use_split_accumulator=False). It halves the
// accumulator registers, so 128x256 and 256x128 tiles fit again, at the
// cost of the accumulator's reduced precision over long reductions.
template <int TileM, int TileN, bool Cooperative>
struct Fp8FastAccumTileConfig : TileConfig<TileM, TileN, 128, 1, Cooperative> {
  using KernelSchedule =
      std::conditional_t<Cooperative,
                         cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum,
                         cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum>;
};

using Fp8FastCoop128x256 = Fp8FastAccumTileConfig<128, 256, true>;
using Fp8FastCoop256x128 = Fp8FastAccumTileConfig<256, 128, true>;
// bf16's choice for routed (skewed) groups, 64-row tiles, at FP8.
using Fp8FastPing64x256 = Fp8FastAccumTileConfig<64, 256, false>;

}  // namespace grouped_linear::cuda::sm90
