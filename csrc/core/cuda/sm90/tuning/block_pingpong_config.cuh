// Tuning candidates: the blockwise-scaled kernels on pingpong tiles.
#pragma once

#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {

// CUTLASS's blockwise mainloop waits for each k-block's MMAs before it
// scales their partial sums into the accumulator, so on a cooperative tile
// both warpgroups scale at the same time and the tensor cores idle
// meanwhile. On pingpong tiles each warpgroup owns a tile, and one's
// scaling and epilogue can overlap the other's MMAs. 64 x 128: a
// warpgroup's accumulator and its k-block temporary (64 + 64 registers a
// thread), one weight scale block across N.
struct Fp8BlockPing64x128 : BlockScaledTileConfig<64, 128> {
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};

}  // namespace grouped_linear::cuda::sm90
