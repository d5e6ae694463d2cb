// A promoting FP8 mainloop whose temporary accumulator covers half the
// tile's width. CUTLASS's promoting mainloop keeps a second accumulator as
// large as the tile's for each k-block's tensor-core partial sums, which caps
// a cooperative warpgroup at 64x192 (2 x 96 registers a thread). Here each
// 128-deep k-block runs as two half-width MMAs into one 64x128 temporary, each
// added into the fp32 accumulator once its MMAs complete: the same promotion
// per k-block (the same sums in the same order), with 128 + 64 accumulator
// registers, so bf16's 128x256 tile fits.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>

#include "core/cuda/sm90/kernel_configs.cuh"
#include "core/cuda/sm90/tensor_core_turns.cuh"

namespace grouped_linear::cuda::sm90 {

// What the half-width promotions share (this one and the blockwise one of
// block_half_promotion_mainloop.cuh): the consumer's TiledMma (atoms half as
// wide as the tile, two warpgroups along M), the operand fragments, and one
// half's MMAs of a k-tile.
template <class Base>
struct HalfWidthMma {
  using TileShape = typename Base::TileShape;
  static constexpr int kTileM = decltype(cute::size<0>(TileShape{}))::value;
  static constexpr int kTileN = decltype(cute::size<1>(TileShape{}))::value;
  static constexpr int kTileK = decltype(cute::size<2>(TileShape{}))::value;
  static_assert(kTileM == 128, "a cooperative tile of two 64-row warpgroups");
  using TiledMma = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<typename Base::ElementA, typename Base::ElementB, float,
                                 cute::Shape<cute::_64, cute::Int<kTileN / 2>, cute::Int<kTileK>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::K>(),
      cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>{}));

  // This thread's A (MMA, 1, MMA_K, PIPE) and B (MMA, 2, MMA_K, PIPE)
  // fragments of the staged operands.
  template <class FrgTensorC>
  CUTLASS_DEVICE static auto fragments(TiledMma& tiled_mma, int thread_idx,
                                       typename Base::TensorStorage& shared_tensors,
                                       FrgTensorC const& accum) {
    using namespace cute;
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()),
                            typename Base::SmemLayoutA{});  // (BLK_M, BLK_K, PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()),
                            typename Base::SmemLayoutB{});  // (BLK_N, BLK_K, PIPE)
    constexpr int kWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    const Layout warp_groups =
        make_layout(Int<kWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    const int warp_group = __shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    auto thread_mma = tiled_mma.get_slice(warp_groups(warp_group));
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));
    static_assert(decltype(size<1>(tCrA))::value == 1 && decltype(size<1>(accum))::value == 1,
                  "one 64-row MMA a warpgroup");
    static_assert(decltype(size<1>(tCrB))::value == 2 && decltype(size<2>(accum))::value == 2,
                  "two half-width MMAs along N");
    return make_tuple(tCrA, tCrB);
  }

  // fn(stage) for each k-tile in turn, once its stage is loaded; fn
  // completes every MMA it issues, so the stage is released right after.
  template <class Fn>
  CUTLASS_DEVICE static void for_each_k_tile(typename Base::MainloopPipeline& pipeline,
                                             typename Base::PipelineState& smem_pipe_read,
                                             int k_tile_count, Fn&& fn) {
    for (; k_tile_count > 0; --k_tile_count) {
      auto token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, token);
      fn(smem_pipe_read.index());
      pipeline.consumer_release(smem_pipe_read);
      ++smem_pipe_read;
    }
  }

  // Half `half` of the k-tile in `stage`, summed into `partial` from zero;
  // its MMAs are complete on return. Issued when `turns` lets this
  // warpgroup (tensor_core_turns.cuh).
  template <class FrgA, class FrgB, class FrgPartial, class Turns>
  CUTLASS_DEVICE static void run_half(TiledMma& tiled_mma, FrgA const& tCrA, FrgB const& tCrB,
                                      int stage, int half, FrgPartial& partial, Turns& turns) {
    using namespace cute;
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
  }
};

// Base: the mainloop CUTLASS builds for a cooperative FP8 (promoting)
// configuration. Only the consumer side changes: its TiledMma (atoms half as
// wide, two along N), mma() and mma_tail(); loads, pipeline and tensor maps
// are the base's. Both warpgroups issue together: taking turns at the tensor
// cores (tensor_core_turns.cuh) gained nothing in the per-tensor kernels,
// whose promotion is one add an element (kernel_entries.h).
template <class Base>
struct HalfPromotionMainloop : Base {
  using Mma = HalfWidthMma<Base>;
  using TiledMma = typename Mma::TiledMma;

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(typename Base::MainloopPipeline pipeline,
                          typename Base::PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx,
                          typename Base::TensorStorage& shared_tensors,
                          typename Base::Params const&) {
    using namespace cute;
    TiledMma tiled_mma;
    auto fragments = Mma::fragments(tiled_mma, thread_idx, shared_tensors, accum);
    auto& tCrA = get<0>(fragments);
    auto& tCrB = get<1>(fragments);
    TogetherAtTensorCores together(thread_idx);
    Tensor partial = make_fragment_like(accum(_, 0, 0));  // one half's tensor-core sums
    clear(accum);
    Mma::for_each_k_tile(pipeline, smem_pipe_read, k_tile_count, [&](int stage) {
      CUTLASS_PRAGMA_UNROLL
      for (int half = 0; half < 2; ++half) {
        Mma::run_half(tiled_mma, tCrA, tCrB, stage, half, partial, together);
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(partial); ++i) accum(i, 0, half) += partial(i);
      }
    });
  }

  // mma() waits for every MMA and releases every stage it read.
  CUTLASS_DEVICE void mma_tail(typename Base::MainloopPipeline, typename Base::PipelineState, int) {
  }
};

// The promoting FP8 kernels on bf16's 128x256 cooperative tile.
struct Fp8HalfPromotionCoop128x256 : TileConfig<128, 256, 128, 1, true> {
  template <class Built>
  using Mainloop = HalfPromotionMainloop<Built>;
};
// With the wide store (kernel_configs.cuh), one 128x128 piece a half.
using Fp8HalfPromotionCoop128x256WideStore = WideStoreConfig<Fp8HalfPromotionCoop128x256, 128>;

}  // namespace grouped_linear::cuda::sm90
