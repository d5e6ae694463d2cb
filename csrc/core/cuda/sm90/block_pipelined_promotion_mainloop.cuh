// The blockwise promotion with each k-block's MMAs issued before the
// previous k-block's sums are scaled. CUTLASS's blockwise mainloop issues a
// k-block's MMAs, waits for all of them, then scales their sums into the
// accumulator (acc += sum * (sfa * sfb)); in a cooperative tile both
// warpgroups reach that wait and scale at about the same time, so the tensor
// cores idle while they do. Here the sums alternate between two temporaries:
// the next k-block's MMAs run into one while the other is scaled, the same
// operations in the same order (the same bits as CUTLASS's kernel). Three
// accumulators of 64 registers a thread, so 128x128 tiles only.
#pragma once

#include <cute/tensor.hpp>

#include "core/cuda/sm90/block_half_promotion_mainloop.cuh"

namespace grouped_linear::cuda::sm90 {

// Base: the blockwise mainloop built for a 128x128 cooperative configuration
// (StridedScaleMainloop). Only mma() and mma_tail() change; TiledMma, loads
// of operands and scales, pipeline and tensor maps are the base's.
template <class Base>
struct BlockPipelinedPromotionMainloop : Base {
  using TileShape = typename Base::TileShape;
  static_assert(decltype(cute::size<2>(TileShape{}))::value == 128, "one scale block per k-tile");
  static_assert(Base::ScaleNsPerTile == 1, "forward and dgrad: one weight block across the tile");

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(typename Base::MainloopPipeline pipeline,
                          typename Base::PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx,
                          typename Base::TensorStorage& shared_tensors,
                          typename Base::Params const&) {
    using namespace cute;
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()),
                            typename Base::SmemLayoutA{});  // (BLK_M, BLK_K, PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()),
                            typename Base::SmemLayoutB{});  // (BLK_N, BLK_K, PIPE)
    auto scale_views = broadcast_scale_views<Base>(shared_tensors);
    Tensor sSFA = get<0>(scale_views);
    Tensor sSFB = get<1>(scale_views);

    using TiledMma = typename Base::TiledMma;
    TiledMma tiled_mma;
    // The operands' descriptors are a warpgroup's (its index made
    // warp-uniform, as CUTLASS's mainloops do); the scales are a thread's.
    constexpr int kWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    const Layout warp_groups =
        make_layout(Int<kWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    const int warp_group = __shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    auto warp_group_mma = tiled_mma.get_slice(warp_groups(warp_group));
    Tensor tCrA = warp_group_mma.make_fragment_A(warp_group_mma.partition_A(sA));  // (MMA,M,K,PIPE)
    Tensor tCrB = warp_group_mma.make_fragment_B(warp_group_mma.partition_B(sB));  // (MMA,N,K,PIPE)
    // Each accumulator element's scales, broadcasts kept: a thread holds only
    // its rows' distinct row scales and the tile's one column scale.
    Tensor tCsSFA = tiled_mma.get_slice(thread_idx).partition_C(sSFA);  // (MMA,M,N,(K,PIPE))
    Tensor tCsSFB = tiled_mma.get_slice(thread_idx).partition_C(sSFB);
    Tensor tCrSFA = make_tensor_like<typename Base::ElementBlockScale>(tCsSFA(_, _, _, _0{}));
    Tensor tCrSFB = make_tensor_like<typename Base::ElementBlockScale>(tCsSFB(_, _, _, _0{}));

    Tensor sums0 = make_fragment_like(accum);  // a k-block's tensor-core sums
    Tensor sums1 = make_fragment_like(accum);
    clear(accum);
    if (k_tile_count <= 0) return;

    typename Base::PipelineState next = smem_pipe_read;    // the next k-tile to issue
    typename Base::PipelineState oldest = smem_pipe_read;  // the oldest k-tile in flight

    // The next k-tile's MMAs into `sums`, from zero, not waited for.
    auto issue = [&](auto& sums) {
      auto token = pipeline.consumer_try_wait(next);
      pipeline.consumer_wait(next, token);
      const int stage = next.index();
      tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
      warpgroup_fence_operand(sums);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
        cute::gemm(tiled_mma, tCrA(_, _, k_block, stage), tCrB(_, _, k_block, stage), sums);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      warpgroup_fence_operand(sums);
      ++next;
    };
    // The oldest k-tile's sums, complete (the caller waited), scaled into
    // the accumulator; its stage is released first.
    auto promote = [&](auto& sums) {
      warpgroup_fence_operand(sums);
      const int stage = oldest.index();
      copy(tCsSFA(_, _, _, make_coord(_0{}, stage)), tCrSFA);
      copy(tCsSFB(_, _, _, make_coord(_0{}, stage)), tCrSFB);
      pipeline.consumer_release(oldest);
      ++oldest;
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) accum(i) += sums(i) * (tCrSFA(i) * tCrSFB(i));
    };

    // Each wait below is static, so that ptxas sees which MMAs each one
    // retires (a wait it cannot place serializes every wgmma, C7514).
    int left = k_tile_count;  // k-tiles not yet promoted; sums0's in flight
    issue(sums0);
    for (; left >= 3; left -= 2) {
      issue(sums1);
      warpgroup_wait<1>();
      promote(sums0);
      issue(sums0);
      warpgroup_wait<1>();
      promote(sums1);
    }
    if (left == 2) {
      issue(sums1);
      warpgroup_wait<1>();
      promote(sums0);
      warpgroup_wait<0>();
      promote(sums1);
    } else {
      warpgroup_wait<0>();
      promote(sums0);
    }
  }

  // mma() waits for every MMA and releases every stage it read.
  CUTLASS_DEVICE void mma_tail(typename Base::MainloopPipeline, typename Base::PipelineState, int) {
  }
};

// The blockwise-scaled forward and dgrad on 128x128 cooperative tiles with
// the pipelined promotion.
struct Fp8BlockPipelinedCoop128x128 : BlockScaledTileConfig<128, 128> {
  template <class Built>
  using Mainloop = BlockPipelinedPromotionMainloop<Built>;
};

}  // namespace grouped_linear::cuda::sm90
