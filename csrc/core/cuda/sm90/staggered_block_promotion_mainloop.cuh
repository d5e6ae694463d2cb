// The blockwise half-width promotion (block_half_promotion_mainloop.cuh)
// with the two consumer warpgroups taking turns at the tensor cores. In the
// cooperative mainloops both warpgroups wait for the same stage, issue their
// MMAs together and then scale their sums together, so the tensor cores idle
// while both scale: for wgrad a multiply and an FMA an element, with its
// column's scale read from shared memory, about as many instructions a
// warpgroup as its half's MMAs take cycles. Here each warpgroup issues a
// half's MMAs only after the other has issued its previous ones, so the MMAs
// queue one warpgroup's behind the other's and one warpgroup scales while
// the other's MMAs run. The same MMAs and sums in the same order as the base.
#pragma once

#include <cutlass/arch/barrier.h>

#include "core/cuda/sm90/block_half_promotion_mainloop.cuh"

namespace grouped_linear::cuda::sm90 {

// The order of the two consumer warpgroups' MMA issues: 0, 1, 0, 1, ...
// through two named barriers (user ids 0 and 1). Warpgroup w arrives at
// barrier w after issuing, and the other syncs on it before its next issue.
// Warpgroup 0's first issue waits for no one, and its sync after the loop
// takes warpgroup 1's last arrival, so each tile's arrivals are all matched.
class TensorCoreTurns {
 public:
  CUTLASS_DEVICE explicit TensorCoreTurns(int thread_idx)
      : warp_group_(__shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarpGroup, 0)) {}

  CUTLASS_DEVICE void before_issue() {
    if (warp_group_ == 1 || issued_) cutlass::arch::NamedBarrier::sync(kThreads, 1 - warp_group_);
    issued_ = true;
  }
  CUTLASS_DEVICE void after_issue() { cutlass::arch::NamedBarrier::arrive(kThreads, warp_group_); }
  CUTLASS_DEVICE void finish() {
    if (warp_group_ == 0 && issued_) cutlass::arch::NamedBarrier::sync(kThreads, 1);
  }

 private:
  static constexpr uint32_t kThreads = 2 * cutlass::NumThreadsPerWarpGroup;
  int warp_group_;
  bool issued_ = false;
};

// Base: as BlockHalfPromotionMainloop's; only mma() differs: the base's
// body with the turns around each half's MMA issue. A copy while this is a
// tuning candidate, so the production kernels' header stays as it is; if it
// wins, the turns become a policy of BlockHalfPromotionMainloop instead.
template <class Base>
struct StaggeredBlockHalfPromotionMainloop : BlockHalfPromotionMainloop<Base> {
  using Parent = BlockHalfPromotionMainloop<Base>;
  using Mma = typename Parent::Mma;
  using TiledMma = typename Parent::TiledMma;

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
    Tensor tCsSFA = tiled_mma.get_slice(thread_idx).partition_C(sSFA);
    Tensor tCsSFB = tiled_mma.get_slice(thread_idx).partition_C(sSFB);
    Tensor tCrSFA = make_tensor_like<typename Base::ElementBlockScale>(tCsSFA(_, _, _, _0{}));
    Tensor tCrSFB = make_tensor_like<typename Base::ElementBlockScale>(tCsSFB(_, _, _, _0{}));

    TensorCoreTurns turns(thread_idx);
    Tensor partial = make_fragment_like(accum(_, 0, 0));
    clear(accum);
    Mma::for_each_k_tile(pipeline, smem_pipe_read, k_tile_count, [&](int stage) {
      copy(tCsSFA(_, _, _, make_coord(_0{}, stage)), tCrSFA);
      if constexpr (!Parent::kColumnScales) copy(tCsSFB(_, _, _, make_coord(_0{}, stage)), tCrSFB);
      CUTLASS_PRAGMA_UNROLL
      for (int half = 0; half < 2; ++half) {
        tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
        warpgroup_fence_operand(partial);
        turns.before_issue();
        warpgroup_arrive();
        CUTLASS_PRAGMA_UNROLL
        for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
          cute::gemm(tiled_mma, tCrA(_, 0, k_block, stage), tCrB(_, half, k_block, stage), partial);
          tiled_mma.accumulate_ = GMMA::ScaleOut::One;
        }
        warpgroup_commit_batch();
        turns.after_issue();
        warpgroup_wait<0>();
        warpgroup_fence_operand(partial);
        if constexpr (Parent::kColumnScales) {
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
};

// The blockwise-scaled kernels on 128x256 cooperative tiles with the
// warpgroups taking turns (tuning candidates).
struct Fp8BlockStaggeredCoop128x256 : BlockScaledTileConfig<128, 256> {
  template <class Built>
  using Mainloop = StaggeredBlockHalfPromotionMainloop<Built>;
};
using Fp8BlockStaggeredCoop128x256WideStore = WideStoreConfig<Fp8BlockStaggeredCoop128x256, 128>;

}  // namespace grouped_linear::cuda::sm90
