// Tile configurations and the macro that instantiates one kernel per .cu
// file. Which configuration each role uses is chosen by measurement on an
// H200 (BENCHMARKS.md, `python -m bench.tune_sm90`); the choice itself is in
// kernel_table.cpp.
#pragma once

#include "core/cuda/sm90/grouped_gemm_sm90.cuh"

namespace grouped_linear::cuda::sm90 {

//                      M    N    K  cluster cooperative
using Coop128x256 = TileConfig<128, 256, 64, 1, true>;
using Coop128x128 = TileConfig<128, 128, 64, 1, true>;
using Coop256x128 = TileConfig<256, 128, 64, 1, true>;
using Ping128x128 = TileConfig<128, 128, 64, 1, false>;
using Ping64x256 = TileConfig<64, 256, 64, 1, false>;
// FP8: 128 one-byte elements of K per stage, one 128-byte swizzle row.
// At most 128 columns of N with the mainloop CUTLASS builds: without fast
// accumulation it keeps a second accumulator for its periodic promotion to
// fp32, and two 64x256 fp32 accumulators per warpgroup (256 registers a
// thread) spill. Wider promoting tiles: half_promotion_mainloop.cuh.
using Fp8Coop128x128 = TileConfig<128, 128, 128, 1, true>;
using Fp8Ping64x128 = TileConfig<64, 128, 128, 1, false>;
// FP8 with blockwise scales: K = 128, one scale block per k-tile.
using Fp8BlockCoop128x128 = BlockScaledTileConfig<128, 128>;

// FP8 with fast accumulation (a recipe's use_split_accumulator=False, which
// Transformer Engine's recipes default to for the forward GEMM): the tensor
// core's own accumulator throughout, with no promotion of each k-block's
// partial sums into a second fp32 accumulator. Half the accumulator
// registers, so bf16's 128x256 and 256x128 tiles fit again, at the cost of
// the accumulator's reduced precision over long reductions (the tolerance
// note of tests/python/test_sm90_fp8_kernels.py).
template <int TileM, int TileN, bool Cooperative>
struct Fp8FastAccumTileConfig : TileConfig<TileM, TileN, 128, 1, Cooperative> {
  static constexpr bool kFastAccumulation = true;
  using KernelSchedule =
      std::conditional_t<Cooperative,
                         cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum,
                         cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum>;
};
using Fp8FastCoop128x256 = Fp8FastAccumTileConfig<128, 256, true>;
using Fp8FastCoop256x128 = Fp8FastAccumTileConfig<256, 128, true>;
using Fp8FastPing64x256 = Fp8FastAccumTileConfig<64, 256, false>;

// wgrad writes G*N*K outputs from short reductions, so its epilogue's stores
// bound it (benchmarks/reading.md). The default epilogue stores a 256x128
// tile as eight 128x32 pieces with at most two in flight; this one stores
// 128 x PieceN pieces, all of a tile in flight, and gives up reading C (the
// staging C would need): beta = 0 only, no main_grad accumulation. The
// half-width promotions' tiles (half_promotion_mainloop.cuh) leave in one
// piece per half-width MMA, PieceN = TileN / 2: a wider piece does not
// match their accumulator's fragments.
template <class Base, int PieceN = Base::kTileN>
struct WideStoreConfig : Base {
  static constexpr bool kReadsSource = false;
  using EpilogueTile = cute::Shape<cute::_128, cute::Int<PieceN>>;
};

}  // namespace grouped_linear::cuda::sm90

// Defines `KernelEntry fn()` for one role, operand and output types and
// configuration (GL_SM90_KERNEL: both operands of one type).
#define GL_SM90_KERNEL_AB(fn, role, element_a, element_b, element_out, config)                   \
  namespace grouped_linear::cuda::sm90 {                                                         \
  KernelEntry fn() {                                                                             \
    return GroupedGemmRunner<Role::role, element_a, element_b, element_out, config>::entry(#fn); \
  }                                                                                              \
  }
#define GL_SM90_KERNEL(fn, role, element_in, element_out, config) \
  GL_SM90_KERNEL_AB(fn, role, element_in, element_in, element_out, config)
