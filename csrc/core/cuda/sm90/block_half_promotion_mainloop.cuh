// The half-width promotion (half_promotion_mainloop.cuh) for blockwise
// scales. CUTLASS's blockwise mainloop, like its per-tensor promoting one,
// keeps each 128-deep k-block's tensor-core sums in a second accumulator as
// large as the tile's, which holds its cooperative tiles to 128x128. Here
// each k-block runs as two half-width MMAs into one 64x128 temporary, each
// added into the fp32 accumulator once its MMAs complete, scaled by its
// rows' and columns' block scales as CUTLASS's mainloop scales them
// (acc += sum * sfa * sfb): 128 + 64 accumulator registers and a few scales,
// so a 128x256 tile fits. The forward's and dgrad's column scales are one
// per half (the weights' 128 x 128 blocks) and stay in registers; wgrad's
// are one per column (Xᵀ's 1 x 128 blocks), 32 distinct ones a thread per
// half, which would not fit beside the accumulators, so each is read from
// the stage's shared memory where it is used.
#pragma once

#include <cute/tensor.hpp>

#include "core/cuda/sm90/half_promotion_mainloop.cuh"

namespace grouped_linear::cuda::sm90 {

// The scales of every stage broadcast over the tile, as CUTLASS's blockwise
// mainloop views them: (BLK_M, BLK_N, (BLK_K, PIPE)) for A's and B's. Base:
// a blockwise mainloop (StridedScaleMainloop).
template <class Base>
CUTLASS_DEVICE auto broadcast_scale_views(typename Base::TensorStorage& shared_tensors) {
  using namespace cute;
  using TileShape = typename Base::TileShape;
  using SmemLayoutSFA = typename Base::SmemLayoutSFA;
  using SmemLayoutSFB = typename Base::SmemLayoutSFB;
  Tensor sSFA = make_tensor(
      make_smem_ptr(shared_tensors.smem_SFA.data()),
      make_layout(
          make_shape(shape<0>(SmemLayoutSFA{}), get<1>(TileShape{}),
                     make_shape(shape<1>(SmemLayoutSFA{}), shape<2>(SmemLayoutSFA{}))),
          make_stride(stride<0>(SmemLayoutSFA{}), _0{},
                      make_stride(stride<1>(SmemLayoutSFA{}), stride<2>(SmemLayoutSFA{})))));
  Tensor sSFB = make_tensor(
      make_smem_ptr(shared_tensors.smem_SFB.data()),
      make_layout(
          make_shape(get<0>(TileShape{}), shape<0>(SmemLayoutSFB{}),
                     make_shape(shape<1>(SmemLayoutSFB{}), shape<2>(SmemLayoutSFB{}))),
          make_stride(_0{}, stride<0>(SmemLayoutSFB{}),
                      make_stride(stride<1>(SmemLayoutSFB{}), stride<2>(SmemLayoutSFB{})))));
  return cute::make_tuple(sSFA, sSFB);
}

// Base: the blockwise mainloop built for a 128x256 cooperative
// configuration (StridedScaleMainloop of grouped_gemm_sm90.cuh). Only the
// consumer side changes: its TiledMma, mma() and mma_tail() (HalfWidthMma's
// pieces); loads of operands and scales, pipeline and tensor maps are the
// base's. Turns: the warpgroups' MMA issue order (tensor_core_turns.cuh).
template <class Base, class Turns = TogetherAtTensorCores>
struct BlockHalfPromotionMainloop : Base {
  using Mma = HalfWidthMma<Base>;
  using TiledMma = typename Mma::TiledMma;
  static_assert(Mma::kTileK == 128, "one scale block per k-tile");
  // wgrad: one scale per column of the tile; else at most one per half.
  static constexpr bool kColumnScales = Base::ScaleNsPerTile > 2;
  static_assert(kColumnScales ? Base::ScaleNsPerTile == Mma::kTileN : true,
                "column scales: one per column of the tile, or at most one per half");

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(typename Base::MainloopPipeline pipeline,
                          typename Base::PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx,
                          typename Base::TensorStorage& shared_tensors,
                          typename Base::Params const&) {
    using namespace cute;
    auto scale_views = broadcast_scale_views<Base>(shared_tensors);
    Tensor sSFA = get<0>(scale_views);
    Tensor sSFB = get<1>(scale_views);

    TiledMma tiled_mma;
    auto fragments = Mma::fragments(tiled_mma, thread_idx, shared_tensors, accum);
    auto& tCrA = get<0>(fragments);
    auto& tCrB = get<1>(fragments);
    // Each accumulator element's row and column scales: (MMA, 1, 2, (K, PIPE)),
    // in registers (MMA, 1, 2) with their broadcasts kept, so a thread holds
    // only its rows' and its halves' distinct scales (wgrad's column scales
    // are read from shared memory instead; their register copy goes unused).
    Tensor tCsSFA = tiled_mma.get_slice(thread_idx).partition_C(sSFA);
    Tensor tCsSFB = tiled_mma.get_slice(thread_idx).partition_C(sSFB);
    Tensor tCrSFA = make_tensor_like<typename Base::ElementBlockScale>(tCsSFA(_, _, _, _0{}));
    Tensor tCrSFB = make_tensor_like<typename Base::ElementBlockScale>(tCsSFB(_, _, _, _0{}));

    Turns turns(thread_idx);
    Tensor partial = make_fragment_like(accum(_, 0, 0));  // one half's tensor-core sums
    clear(accum);
    Mma::for_each_k_tile(pipeline, smem_pipe_read, k_tile_count, [&](int stage) {
      copy(tCsSFA(_, _, _, make_coord(_0{}, stage)), tCrSFA);
      if constexpr (!kColumnScales) copy(tCsSFB(_, _, _, make_coord(_0{}, stage)), tCrSFB);
      CUTLASS_PRAGMA_UNROLL
      for (int half = 0; half < 2; ++half) {
        Mma::run_half(tiled_mma, tCrA, tCrB, stage, half, partial, turns);
        if constexpr (kColumnScales) {
          // The stage is released only after this k-tile, so its scales
          // are still there.
          Tensor sfb = tCsSFB(_, 0, half, make_coord(_0{}, stage));
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < size(partial); ++i)
            accum(i, 0, half) += partial(i) * tCrSFA(i, 0, half) * sfb(i);
        } else {
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < size(partial); ++i)
            accum(i, 0, half) += partial(i) * tCrSFA(i, 0, half) * tCrSFB(i, 0, half);
        }
      }
    });
    turns.finish();
  }

  // mma() waits for every MMA and releases every stage it read.
  CUTLASS_DEVICE void mma_tail(typename Base::MainloopPipeline, typename Base::PipelineState, int) {
  }
};

// The blockwise-scaled kernels on bf16's 128x256 cooperative tile.
struct Fp8BlockHalfPromotionCoop128x256 : BlockScaledTileConfig<128, 256> {
  template <class Built>
  using Mainloop = BlockHalfPromotionMainloop<Built>;
};
using Fp8BlockHalfPromotionCoop128x256WideStore =
    WideStoreConfig<Fp8BlockHalfPromotionCoop128x256, 128>;

// The same with the warpgroups taking turns at the tensor cores.
struct Fp8BlockStaggeredCoop128x256 : BlockScaledTileConfig<128, 256> {
  template <class Built>
  using Mainloop = BlockHalfPromotionMainloop<Built, TurnsAtTensorCores>;
};
using Fp8BlockStaggeredCoop128x256WideStore = WideStoreConfig<Fp8BlockStaggeredCoop128x256, 128>;

}  // namespace grouped_linear::cuda::sm90
