// Tuning candidates: a producer that also asks L2 for the weight tile
// `Distance` k-tiles ahead of the one it loads.
#pragma once

#include <cute/tensor.hpp>

#include "core/cuda/sm90/half_promotion_mainloop.cuh"
#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {

// At 32-128 experts the forward and dgrad stream every expert's weights
// (operand B) from memory once, and the mainloop's shared-memory stages
// (four of 48 KB at 128x256) look only about 3.4 us of MMAs ahead. A TMA
// prefetch into L2 needs no shared memory, so the producer can reach
// further ahead: with each k-tile it loads into a stage, it prefetches B's
// tile `Distance` k-tiles later (within the same output tile). The loads
// are the base mainloop's (one CTA, no multicast); only the prefetch is new.
template <class Base, int Distance>
struct L2PrefetchLoad : Base {
  template <class TensorA, class TensorB, class TensorMapA, class TensorMapB, class KTileIterator,
            class BlockCoord>
  CUTLASS_DEVICE void load(typename Base::Params const& mainloop_params,
                           typename Base::MainloopPipeline pipeline,
                           typename Base::PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB> const& load_inputs,
                           cute::tuple<TensorMapA, TensorMapB> const& input_tensormaps,
                           BlockCoord const& blk_coord, KTileIterator k_tile_iter, int k_tile_count,
                           int, uint32_t, typename Base::TensorStorage& shared_tensors) {
    using namespace cute;
    static_assert(size(typename Base::DispatchPolicy::ClusterShape{}) == 1, "no multicast");
    if (!elect_one_sync()) return;
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()),
                            typename Base::SmemLayoutA{});  // (BLK_M, BLK_K, PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()),
                            typename Base::SmemLayoutB{});  // (BLK_N, BLK_K, PIPE)
    auto block_tma_a = mainloop_params.tma_load_a.get_slice(0);
    auto block_tma_b = mainloop_params.tma_load_b.get_slice(0);
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
    Tensor tAgA = block_tma_a.partition_S(get<0>(load_inputs)(_, _, m_coord, _, l_coord));
    Tensor tAsA = block_tma_a.partition_D(sA);
    Tensor tBgB = block_tma_b.partition_S(get<1>(load_inputs)(_, _, n_coord, _, l_coord));
    Tensor tBsB = block_tma_b.partition_D(sB);

    KTileIterator prefetch_iter = k_tile_iter;
    for (int i = 0; i < Distance && i < k_tile_count; ++i) ++prefetch_iter;
    int prefetches = k_tile_count - Distance;
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      pipeline.producer_acquire(smem_pipe_write);
      auto* tma_barrier = pipeline.producer_get_barrier(smem_pipe_write);
      const int stage = smem_pipe_write.index();
      auto load_b = mainloop_params.tma_load_b.with(get<1>(input_tensormaps), *tma_barrier, 0);
      copy(mainloop_params.tma_load_a.with(get<0>(input_tensormaps), *tma_barrier, 0),
           tAgA(_, _, _, *k_tile_iter), tAsA(_, _, _, stage));
      copy(load_b, tBgB(_, _, _, *k_tile_iter), tBsB(_, _, _, stage));
      if (prefetches > 0) {
        prefetch(load_b, tBgB(_, _, _, *prefetch_iter));
        ++prefetch_iter;
        --prefetches;
      }
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }
};

template <class Config, int Distance>
struct PrefetchingHalfPromotion : Config {
  template <class Built>
  using Mainloop = L2PrefetchLoad<HalfPromotionMainloop<Built>, Distance>;
};
template <class Config, int Distance>
struct PrefetchingBuilt : Config {
  template <class Built>
  using Mainloop = L2PrefetchLoad<Built, Distance>;
};

using Fp8HalfPromotionCoop128x256Pf4 = PrefetchingHalfPromotion<Fp8HalfPromotionCoop128x256, 4>;
using Fp8HalfPromotionCoop128x256Pf8 = PrefetchingHalfPromotion<Fp8HalfPromotionCoop128x256, 8>;
using Fp8FastCoop128x256Pf4 = PrefetchingBuilt<Fp8FastCoop128x256, 4>;
using Coop128x256Pf4 = PrefetchingBuilt<Coop128x256, 4>;

}  // namespace grouped_linear::cuda::sm90
