// CUTLASS's pointer-array cooperative epilogue, with its TMA store descriptor
// in two slots so that a group switch does not wait for the stores in flight.
//
// At each group switch CUTLASS's epilogue rewrites its one store descriptor
// in global memory, and first waits until every store issued with it has
// read its tile out of shared memory (tensormaps_cp_fence_release), before
// the next tile's MMAs. A wgrad at 32-128 experts switches groups at almost
// every tile of a CTA (qwen3 fc1: 96 tiles a group, 132 CTAs taking every
// 132nd tile), so its MMAs waited for the previous tile's stores (Nsight
// Compute: the FP8 wgrad's DRAM 65-76% busy, its tensor pipes 26-33%;
// benchmarks/reading.md). Here the descriptor alternates between the two
// slots CUTLASS keeps per SM, one per consumer warpgroup (warpgroup 1's is
// free: only warp 0 of warpgroup 0 issues a cooperative epilogue's stores),
// and a switch waits only for the stores that used the slot it rewrites,
// those committed before the previous switch. Measured: +0.04 to +0.06 of
// dense at qwen3's FP8 wgrads on an H200, within 0.01 at dsv3 (fewer
// switches), so the table takes these kernels for short reductions only.
#pragma once

#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {

// The epilogue schedule of OverlappedSwitch configurations; the
// CollectiveBuilder at the end builds CUTLASS's cooperative epilogue and
// wraps it in OverlappedSwitchEpilogue.
struct OverlappedSwitchCooperative {};

template <class Base>
struct OverlappedSwitch : Base {
  static_assert(std::is_same_v<typename Base::EpilogueSchedule,
                               cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>,
                "the overlapped switch needs the cooperative epilogue's second slot");
  using EpilogueSchedule = OverlappedSwitchCooperative;
};

// Pieces: the tile's output pieces, each one committed bulk-copy group.
template <class Cutlass, int Pieces>
class OverlappedSwitchEpilogue : public Cutlass {
 public:
  using Cutlass::Cutlass;
  using typename Cutlass::Params;
  using typename Cutlass::TensorMapStorage;
  static_assert(Cutlass::NumEpilogueWarpGroups == 2, "two descriptor slots per SM");

  // Every consumer thread: both slots of this SM in CUTLASS's (SMs, tensors)
  // column-major descriptor array.
  CUTLASS_DEVICE auto store_init(Params const& params, TensorMapStorage& shared, int32_t sm_count,
                                 int32_t sm_idx, int32_t warp_group_idx) {
    slots_[0] = params.tensormaps + sm_idx;
    slots_[1] = slots_[0] + sm_count;
    current_ = slots_[0];
    return Cutlass::store_init(params, shared, sm_count, sm_idx, warp_group_idx);
  }

  // Warpgroup 1 keeps no descriptor of its own: its slot is warpgroup 0's second.
  template <bool IsLoad, class ProblemShape>
  CUTLASS_DEVICE void tensormaps_perform_update(TensorMapStorage& shared, Params const& params,
                                                cute::TmaDescriptor const* tensormap,
                                                ProblemShape shape, int32_t next_batch,
                                                int32_t warp_group_idx) {
    if (IsLoad || warp_group_idx == 0)
      Cutlass::template tensormaps_perform_update<IsLoad>(shared, params, tensormap, shape,
                                                          next_batch, warp_group_idx);
  }

  // Warp 0 of each warpgroup, all lanes. The slot rewritten now was last used
  // by stores committed before the previous switch's commit; since then each
  // tile committed `Pieces` groups and this switch one, so up to Pieces + 1
  // groups may stay in flight.
  template <bool IsLoad>
  CUTLASS_DEVICE void tensormaps_cp_fence_release(TensorMapStorage& shared,
                                                  cute::TmaDescriptor const* tensormap,
                                                  const int32_t warp_group_idx = 0) {
    if constexpr (IsLoad) {
      Cutlass::template tensormaps_cp_fence_release<IsLoad>(shared, tensormap, warp_group_idx);
    } else if (warp_group_idx == 0) {
      if (cute::elect_one_sync()) {
        cute::tma_desc_commit_group();
        cute::tma_store_wait<Pieces + 1>();
      }
      cute::tma_descriptor_cp_fence_release(slots_[released_ & 1], shared.smem_tensormap_D[0]);
      ++released_;
    }
  }

  // Every consumer thread, once per switch, after warp 0's release above.
  template <bool IsLoad>
  CUTLASS_DEVICE void tensormaps_fence_acquire(cute::TmaDescriptor const* tensormap) {
    if constexpr (IsLoad) {
      Cutlass::template tensormaps_fence_acquire<IsLoad>(tensormap);
    } else {
      current_ = slots_[acquired_ & 1];
      ++acquired_;
      cute::tma_descriptor_fence_acquire(current_);
    }
  }

  template <class LoadPipeline, class LoadState, class StorePipeline, class StoreState,
            class ProblemShapeMNKL, class TileShapeMNK, class TileCoordMNKL, class AccEngine,
            class AccLayout, class TiledMma, class TensorMapD>
  CUTLASS_DEVICE auto store(LoadPipeline load_pipeline, LoadState load_state,
                            StorePipeline store_pipeline, StoreState store_state,
                            ProblemShapeMNKL problem_shape_mnkl, TileShapeMNK tile_shape_mnk,
                            TileCoordMNKL tile_coord_mnkl,
                            cute::Tensor<AccEngine, AccLayout> accumulators, TiledMma tiled_mma,
                            int thread_idx, typename Cutlass::TensorStorage& shared_tensors,
                            TensorMapD const&, int subtile_idx = -1) {
    return Cutlass::store(load_pipeline, load_state, store_pipeline, store_state,
                          problem_shape_mnkl, tile_shape_mnk, tile_coord_mnkl, accumulators,
                          tiled_mma, thread_idx, shared_tensors, current_, subtile_idx);
  }

 private:
  cute::TmaDescriptor* slots_[2] = {nullptr, nullptr};
  cute::TmaDescriptor* current_ = nullptr;
  int released_ = 0, acquired_ = 0;
};

}  // namespace grouped_linear::cuda::sm90

namespace cutlass::epilogue::collective {

template <class OpClass, class TileShape_MNK, class ClusterShape_MNK, class EpilogueTileType,
          class ElementAccumulator, class ElementCompute, class ElementC, class GmemLayoutTagC,
          int AlignmentC, class ElementD, class GmemLayoutTagD, int AlignmentD,
          class FusionOperation>
struct CollectiveBuilder<
    arch::Sm90, OpClass, TileShape_MNK, ClusterShape_MNK, EpilogueTileType, ElementAccumulator,
    ElementCompute, ElementC, GmemLayoutTagC, AlignmentC, ElementD, GmemLayoutTagD, AlignmentD,
    grouped_linear::cuda::sm90::OverlappedSwitchCooperative, FusionOperation, void> {
 private:
  using Cutlass = typename CollectiveBuilder<
      arch::Sm90, OpClass, TileShape_MNK, ClusterShape_MNK, EpilogueTileType, ElementAccumulator,
      ElementCompute, ElementC, GmemLayoutTagC, AlignmentC, ElementD, GmemLayoutTagD, AlignmentD,
      PtrArrayTmaWarpSpecializedCooperative, FusionOperation>::CollectiveOp;
  static constexpr int kPieces = cute::size(
      cute::shape_div(cute::take<0, 2>(TileShape_MNK{}), typename Cutlass::EpilogueTile{}));

 public:
  using CollectiveOp = grouped_linear::cuda::sm90::OverlappedSwitchEpilogue<Cutlass, kPieces>;
};

}  // namespace cutlass::epilogue::collective
