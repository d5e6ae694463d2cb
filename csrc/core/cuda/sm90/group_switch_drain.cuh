// Group switches that wait for the TMA loads still reading the old group.
//
// CUTLASS 4.2's pointer-array kernels keep one TMA descriptor per operand and
// CTA in global memory and, when a CTA moves to a tile of another group,
// rewrite it in place (tensormap.cp_fenceproxy) while loads issued with it
// may still be in flight. Before the rewrite they wait on the bulk async-group
// (cp.async.bulk.wait_group.read), which covers TMA stores but not TMA loads:
// those complete on the stage's mbarrier. A load whose descriptor is read
// after the rewrite fetches the next group's data at the old group's
// coordinates. With mostly empty groups (one 16-deep k-tile of zeros each,
// back to back) an empty group's wgrad tile then multiplies real rows and
// comes out non-zero (RELIABILITY.md, "empty-group corruption").
//
// The wrappers below remember the stages filled since the descriptors were
// last written and, before the next rewrite, wait on those stages' full
// barriers, as a consumer would: a completed fill means its descriptor has
// been read. Only the producer refills a stage, so the last `Stages` fills
// are the only ones that can be in flight, and a fill the consumers already
// released is complete (its wait returns at once).
#pragma once

#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cute/tensor.hpp>

namespace grouped_linear::cuda::sm90 {

// Fills of one producer pipeline since the last drain: the first one's state
// and how many (contiguous: each load continues where the last one ended).
template <class PipelineState, int Stages>
struct InFlightFills {
  PipelineState first{};
  int count = 0;

  CUTLASS_DEVICE void record(PipelineState begin, int fills) {
    if (fills <= 0) return;
    if (count == 0) first = begin;
    count += fills;
  }

  // Waits for the last min(count, Stages) fills to land. A producer state's
  // phase is the consumer's inverted (make_producer_start_state), so a fill
  // made at producer phase p completes the full barrier's phase p ^ 1.
  template <class Pipeline>
  CUTLASS_DEVICE void drain(Pipeline& pipeline) {
    PipelineState state = first;
    if (count > Stages) state.advance(count - Stages);
    const int pending = count < Stages ? count : Stages;
    for (int i = 0; i < pending; ++i) {
      cutlass::arch::ClusterBarrier::wait(pipeline.producer_get_barrier(state.index()),
                                          state.phase() ^ 1u);
      ++state;
    }
    count = 0;
  }
};

// The full barriers of a pipeline (one 64-bit mbarrier per stage, in stage
// order), kept from load() for the drain in tensormaps_cp_fence_release(),
// which is not handed the pipeline.
template <class Pipeline, class PipelineState>
struct PipelineBarriers {
  uint64_t const* full = nullptr;
  CUTLASS_DEVICE uint64_t const* producer_get_barrier(int stage) const { return full + stage; }
  CUTLASS_DEVICE void remember(Pipeline& pipeline) {
    full = reinterpret_cast<uint64_t const*>(pipeline.producer_get_barrier(PipelineState{}));
  }
};

// The mainloop's A and B loads (every pointer-array mainloop: the kernel
// calls load() with the same arguments for the plain, promoting and
// block-scaled ones).
template <class Base>
struct GroupSwitchDrainedMainloop : Base {
  using PipelineState = typename Base::PipelineState;
  using MainloopPipeline = typename Base::MainloopPipeline;
  static constexpr int kStages = static_cast<int>(PipelineState::Stages);

  InFlightFills<PipelineState, kStages> fills_;
  PipelineBarriers<MainloopPipeline, PipelineState> barriers_;

  template <class LoadInputs, class TensorMaps, class BlockCoord, class KTileIterator>
  CUTLASS_DEVICE void load(typename Base::Params const& params, MainloopPipeline pipeline,
                           PipelineState smem_pipe_write, LoadInputs const& load_inputs,
                           TensorMaps const& input_tensormaps, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int thread_idx,
                           uint32_t block_rank_in_cluster,
                           typename Base::TensorStorage& shared_tensors) {
    barriers_.remember(pipeline);
    fills_.record(smem_pipe_write, k_tile_count);
    Base::load(params, pipeline, smem_pipe_write, load_inputs, input_tensormaps, blk_coord,
               k_tile_iter, k_tile_count, thread_idx, block_rank_in_cluster, shared_tensors);
  }

  // Called by the whole producer warp after the shared-memory copies of the
  // descriptors were updated for the next group, before they are copied out.
  template <class TensorMaps>
  CUTLASS_DEVICE void tensormaps_cp_fence_release(
      typename Base::TensorMapStorage& shared_tensormaps, TensorMaps const& input_tensormaps) {
    if (fills_.count > 0) fills_.drain(barriers_);
    __syncwarp();
    Base::tensormaps_cp_fence_release(shared_tensormaps, input_tensormaps);
  }
};

// The epilogue's C loads (read when D accumulates into C, e.g. main_grad),
// rewritten the same way. Its D stores need nothing more: the TMA unit reads
// a store's descriptor before the shared memory it sends, and the base waits
// for those reads (wait_group.read) before the rewrite.
template <class Base>
struct GroupSwitchDrainedEpilogue : Base {
  using Base::Base;
  using LoadPipeline = typename Base::LoadPipeline;
  using LoadPipelineState = typename Base::LoadPipelineState;
  static constexpr int kStages = static_cast<int>(LoadPipelineState::Stages);

  InFlightFills<LoadPipelineState, kStages> fills_;
  PipelineBarriers<LoadPipeline, LoadPipelineState> barriers_;

  template <class... Rest>
  CUTLASS_DEVICE auto load(LoadPipeline load_pipeline, LoadPipelineState load_pipe_producer_state,
                           Rest&&... rest) {
    barriers_.remember(load_pipeline);
    const LoadPipelineState next =
        Base::load(load_pipeline, load_pipe_producer_state, static_cast<Rest&&>(rest)...);
    fills_.record(load_pipe_producer_state,
                  static_cast<int>(next.count() - load_pipe_producer_state.count()));
    return next;
  }

  template <bool IsLoad>
  CUTLASS_DEVICE void tensormaps_cp_fence_release(
      typename Base::TensorMapStorage& shared_tensormaps, cute::TmaDescriptor const* tensormap,
      const int32_t warp_group_idx = 0) {
    if constexpr (IsLoad) {
      if (fills_.count > 0) fills_.drain(barriers_);
      __syncwarp();
    }
    Base::template tensormaps_cp_fence_release<IsLoad>(shared_tensormaps, tensormap,
                                                       warp_group_idx);
  }
};

}  // namespace grouped_linear::cuda::sm90
