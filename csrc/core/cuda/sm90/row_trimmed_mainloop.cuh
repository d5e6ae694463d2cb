// A cooperative mainloop without the MMAs of rows past a group's end. A
// cooperative 128-row tile gives each of its two consumer warpgroups 64
// rows; where a group's last tile holds 64 rows or fewer, the second
// warpgroup's rows all lie past the group's end, and its MMAs compute
// values the epilogue never stores (the output's tensor map ends at the
// group's last row). Routed groups end in such a tile about half the time.
// Here that warpgroup still waits for each stage and releases it, so the
// pipeline runs as before, but issues no MMA; the other warpgroup runs the
// wrapped mainloop's mma() unchanged.
//
// The consumers are not told which tile they work on (CUTLASS's kernel
// passes mma() only the k-tile count), so the producer, which is, writes
// each tile's row count into shared memory before it loads the tile's
// first stage. That stage's full barrier orders the write before the
// consumers' read (the producer's arrival releases, their wait acquires).
// Slots are taken in tile order by both sides; a slot is written again
// kStages + 1 tiles later, after the producer has acquired the first stage
// of its earlier tile once more, which the consumers release only after
// reading the slot.
#pragma once

#include <cute/tensor.hpp>

#include "core/cuda/sm90/grouped_gemm_sm90.cuh"

namespace grouped_linear::cuda::sm90 {

template <class Base>
struct RowTrimmedMainloop : Base {
  using TiledMma = typename Base::TiledMma;
  static constexpr int kStages = Base::DispatchPolicy::Stages;
  static constexpr int kSlots = kStages + 1;
  static constexpr int kTileM = decltype(cute::size<0>(typename Base::TileShape{}))::value;
  static constexpr int kWarpGroups = cute::size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
  static_assert(kWarpGroups == 2, "a cooperative tile: two consumer warpgroups along M");
  static constexpr int kWarpGroupRows = kTileM / kWarpGroups;

  struct TensorStorage : Base::TensorStorage {
    int tile_rows[kSlots];  // the group's rows from the tile's first row on
  };

  // Tiles with k-tiles this thread has loaded (producer) or multiplied
  // (consumers); both walk the scheduler's tiles in the same order.
  int tiles_seen_ = 0;
  bool skipped_ = false;  // this warpgroup issued no MMA for the last tile

  // The base's inputs, then the current group's row count.
  template <class ProblemShapeMNKL, class... Scales>
  CUTLASS_DEVICE auto load_init(ProblemShapeMNKL const& problem_shape_mnkl,
                                typename Base::Params const& params,
                                Scales const&... scales) const {
    return cute::append(Base::load_init(problem_shape_mnkl, params, scales...),
                        static_cast<int>(cute::get<0>(problem_shape_mnkl)));
  }

  template <class InputTensors, class ProblemShapeMNKL>
  CUTLASS_DEVICE InputTensors tensors_perform_update(InputTensors const& inputs,
                                                     typename Base::Params const& params,
                                                     ProblemShapeMNKL problem_shape_mnkl,
                                                     int32_t next_batch) {
    return cute::append(
        Base::tensors_perform_update(base_inputs(inputs), params, problem_shape_mnkl, next_batch),
        static_cast<int>(cute::get<0>(problem_shape_mnkl)));
  }

  // Producer: every lane of the warp writes the same count, so the lane
  // that arrives on the barrier has written it.
  template <class InputTensors, class TensorMaps, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(typename Base::Params const& params,
                           typename Base::MainloopPipeline pipeline,
                           typename Base::PipelineState smem_pipe_write, InputTensors const& inputs,
                           TensorMaps const& tensormaps, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int thread_idx,
                           uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    if (k_tile_count > 0) {
      const int first_row = static_cast<int>(cute::get<0>(blk_coord)) * kTileM;
      shared_tensors.tile_rows[tiles_seen_ % kSlots] = group_rows(inputs) - first_row;
      ++tiles_seen_;
    }
    Base::load(params, pipeline, smem_pipe_write, base_inputs(inputs), tensormaps, blk_coord,
               k_tile_iter, k_tile_count, thread_idx, block_rank_in_cluster, shared_tensors);
  }

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(typename Base::MainloopPipeline pipeline,
                          typename Base::PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors,
                          typename Base::Params const& params) {
    skipped_ = false;
    if (k_tile_count > 0) {
      const int slot = tiles_seen_++ % kSlots;
      auto token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, token);
      const int first_row = thread_idx / cutlass::NumThreadsPerWarpGroup * kWarpGroupRows;
      skipped_ = first_row >= shared_tensors.tile_rows[slot];  // uniform across the warpgroup
    }
    if (!skipped_) {  // waiting again on the first stage returns at once
      Base::mma(pipeline, smem_pipe_read, accum, k_tile_count, thread_idx, shared_tensors, params);
      return;
    }
    cute::clear(accum);  // never stored: its rows are past the group's end
    for (; k_tile_count > 0; --k_tile_count) {
      auto token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, token);
      pipeline.consumer_release(smem_pipe_read);
      ++smem_pipe_read;
    }
  }

  // A skipped tile's stages are all released already.
  CUTLASS_DEVICE void mma_tail(typename Base::MainloopPipeline pipeline,
                               typename Base::PipelineState smem_pipe_release, int k_tile_count) {
    if (!skipped_) Base::mma_tail(pipeline, smem_pipe_release, k_tile_count);
  }

 private:
  template <class InputTensors>
  CUTLASS_DEVICE static auto base_inputs(InputTensors const& inputs) {
    return cute::take<0, cute::tuple_size_v<InputTensors> - 1>(inputs);
  }
  template <class InputTensors>
  CUTLASS_DEVICE static int group_rows(InputTensors const& inputs) {
    return cute::get<cute::tuple_size_v<InputTensors> - 1>(inputs);
  }
};

// A configuration whose mainloop (its own, or the one CUTLASS builds) runs
// row-trimmed.
template <class Config>
struct RowTrimmedConfig : Config {
  template <class Built>
  using Mainloop = RowTrimmedMainloop<typename ConfiguredMainloop<Config, Built>::type>;
};

}  // namespace grouped_linear::cuda::sm90
