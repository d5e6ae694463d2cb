// A mainloop for the forward and dgrad that reads A and B through one tensor
// map each for the whole call, so that a group switch costs its producer no
// tensor-map update.
//
// CUTLASS's pointer-array mainloop rewrites both load maps at each group
// switch (reads the group's pointers, shape and strides, edits the maps in
// shared memory, copies them to global memory and fences them, then
// acquires them) before the next tile's first load. At 32-128 experts
// nearly every tile a CTA takes is in another group than its last. Here
// A (all T rows of X or dY) and B (the G weights, [G * rows, K]) are mapped
// whole, once per CTA; a group is a row offset into them. Tiles of a group
// that run past its last row read the next group's rows (or zeros past the
// end), and the epilogue's per-group store drops those rows and columns, as
// it drops the zeros of CUTLASS's per-group maps.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <type_traits>
#include <utility>

#include "core/cuda/sm90/half_promotion_mainloop.cuh"
#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {

template <class Base>
struct WholeOperandMapsMainloop : Base {
  using typename Base::Arguments;
  using typename Base::TensorMapStorage;
  // The element types of the maps (the FP8 mainloop's own, the 16-bit one's
  // same-sized integers), as the pointer arrays hold them.
  using MapElementA = std::remove_cv_t<std::remove_pointer_t<
      std::remove_pointer_t<decltype(std::declval<typename Base::Params>().ptr_A)>>>;
  using MapElementB = std::remove_cv_t<std::remove_pointer_t<
      std::remove_pointer_t<decltype(std::declval<typename Base::Params>().ptr_B)>>>;
  using GroupShape = cute::Shape<int, int, int>;

  // The group count and the per-group problem shapes (in the call's
  // workspace), from which the first switch sizes the whole operands.
  struct Params : Base::Params {
    const GroupShape* problems = nullptr;
    int groups = 0;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape problem_shapes, Arguments const& args,
                                        void* workspace) {
    Params params;
    static_cast<typename Base::Params&>(params) =
        Base::to_underlying_arguments(problem_shapes, args, workspace);
    params.problems = reinterpret_cast<const GroupShape*>(problem_shapes.problem_shapes);
    params.groups = problem_shapes.groups();
    return params;
  }

  // Tiled TMA coordinates of A and B with their first rows at a_row and b_row.
  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto tiles_at(ProblemShape_MNKL const& shape, Params const& params, int32_t a_row,
                               int32_t b_row) const {
    using namespace cute;
    using X = Underscore;
    auto [M, N, K, L] = shape;
    Tensor mA = params.tma_load_a.get_tma_tensor(make_shape(M, K, 1));
    Tensor mB = params.tma_load_b.get_tma_tensor(make_shape(N, K, 1));
    Tensor mA_group = domain_offset(make_coord(a_row, _0{}, _0{}), mA);
    Tensor mB_group = domain_offset(make_coord(b_row, _0{}, _0{}), mB);
    return make_tuple(
        local_tile(mA_group, typename Base::TileShape{}, make_coord(_, _, _), Step<_1, X, _1>{}),
        local_tile(mB_group, typename Base::TileShape{}, make_coord(_, _, _), Step<X, _1, _1>{}));
  }

  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& shape, Params const& params) const {
    return tiles_at(shape, params, 0, 0);
  }

  // A switch: the group's first rows in A and B, from its pointers.
  template <class InputTensors, class ProblemShape_MNKL>
  CUTLASS_DEVICE InputTensors tensors_perform_update(InputTensors const&, Params const& params,
                                                     ProblemShape_MNKL shape, int32_t next_batch) {
    const int64_t a_row = (params.ptr_A[next_batch] - params.ptr_A[0]) /
                          static_cast<int64_t>(cute::get<0>(params.dA[next_batch]));
    const int64_t b_row = (params.ptr_B[next_batch] - params.ptr_B[0]) /
                          static_cast<int64_t>(cute::get<0>(params.dB[next_batch]));
    return tiles_at(shape, params, static_cast<int32_t>(a_row), static_cast<int32_t>(b_row));
  }

  // The first call maps the whole operands; later switches change nothing.
  template <class TensorMapA, class TensorMapB, class ProblemShape_MNKL>
  CUTLASS_DEVICE void tensormaps_perform_update(TensorMapStorage& shared, Params const& params,
                                                cute::tuple<TensorMapA, TensorMapB> const&,
                                                ProblemShape_MNKL shape, int32_t) {
    using namespace cute;
    if (mapped_) return;
    if (cute::elect_one_sync()) {
      const int last = params.groups - 1;
      const int64_t a_ld = get<0>(params.dA[0]);
      // A: up to the last group's last row (rows past T were clamped away
      // by the argument setup). B: every group's rows, as many as the
      // first group's.
      const int64_t a_rows =
          (params.ptr_A[last] - params.ptr_A[0]) / a_ld + get<0>(params.problems[last]);
      const int64_t b_rows = static_cast<int64_t>(params.groups) * get<1>(shape);
      const uint32_t K = get<2>(shape);
      cute::tma_descriptor_replace_addr_in_shared_mem(shared.smem_tensormap_A, params.ptr_A[0]);
      cute::tma_descriptor_replace_addr_in_shared_mem(shared.smem_tensormap_B, params.ptr_B[0]);
      constexpr int kMaxRank = 5;
      cute::array<uint32_t, kMaxRank> shape_a = {1, 1, 1, 1, 1}, shape_b = {1, 1, 1, 1, 1};
      cute::array<uint64_t, kMaxRank> stride_a = {0, 0, 0, 0, 0}, stride_b = {0, 0, 0, 0, 0};
      Tensor whole_a = make_tensor(
          static_cast<MapElementA const*>(nullptr),
          make_shape(static_cast<uint32_t>(a_rows > 0 ? a_rows : 1), K, Int<1>{}), params.dA[0]);
      Tensor whole_b =
          make_tensor(static_cast<MapElementB const*>(nullptr),
                      make_shape(static_cast<uint32_t>(b_rows), K, Int<1>{}), params.dB[0]);
      cute::detail::fill_tma_gmem_shape_stride(params.tma_load_a, whole_a, shape_a, stride_a);
      cute::detail::fill_tma_gmem_shape_stride(params.tma_load_b, whole_b, shape_b, stride_b);
      for (uint64_t& s : stride_a) s = s * cute::sizeof_bits_v<MapElementA> / 8;
      for (uint64_t& s : stride_b) s = s * cute::sizeof_bits_v<MapElementB> / 8;
      cute::tma_descriptor_replace_dims_strides_in_shared_mem(shared.smem_tensormap_A, shape_a,
                                                              stride_a);
      cute::tma_descriptor_replace_dims_strides_in_shared_mem(shared.smem_tensormap_B, shape_b,
                                                              stride_b);
    }
  }

  template <class TensorMapA, class TensorMapB>
  CUTLASS_DEVICE void tensormaps_cp_fence_release(TensorMapStorage& shared,
                                                  cute::tuple<TensorMapA, TensorMapB> const& maps) {
    if (mapped_) return;
    Base::tensormaps_cp_fence_release(shared, maps);
    mapped_ = true;
  }

  template <class TensorMapA, class TensorMapB>
  CUTLASS_DEVICE void tensormaps_fence_acquire(cute::tuple<TensorMapA, TensorMapB> const& maps) {
    if (acquired_) return;
    Base::tensormaps_fence_acquire(maps);
    acquired_ = true;
  }

 private:
  bool mapped_ = false, acquired_ = false;
};

// The production promoting forward's and dgrad's tile and promotion, their
// loads through whole-operand maps.
struct Fp8HalfPromotionCoop128x256WholeMaps : Fp8HalfPromotionCoop128x256 {
  template <class Built>
  using Mainloop = WholeOperandMapsMainloop<HalfPromotionMainloop<Built>>;
};

}  // namespace grouped_linear::cuda::sm90
