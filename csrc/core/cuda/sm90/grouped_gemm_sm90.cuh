// The kernel family behind grouped_gemm_sm90.h: a CUTLASS 3 pointer-array
// grouped GEMM (TMA loads, wgmma, warp-specialized persistent CTAs, the
// grouped tile scheduler reading problem shapes on the device) and the setup
// kernel that writes its per-group arguments. Each instantiation lives in its
// own .cu file so they compile in parallel.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include "core/cuda/cuda_check.h"
#include "core/cuda/sm90/grouped_gemm_sm90.h"

namespace grouped_linear::cuda::sm90 {

// Tile and schedule of one kernel. Cooperative: two consumer warpgroups share
// one 128 x N tile; Pingpong: they alternate between tiles.
template <int TileM, int TileN, int TileK, int ClusterM, bool Cooperative>
struct TileConfig {
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::_1, cute::_1>;
  using KernelSchedule =
      std::conditional_t<Cooperative, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                         cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong>;
  using EpilogueSchedule =
      std::conditional_t<Cooperative, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
                         cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>;
};

// CUTLASS layouts per role. CUTLASS's B is K x N: "ColumnMajor" B is K-major.
template <Role R>
struct RoleLayouts;
template <>
struct RoleLayouts<Role::kForward> {  // X row-major, W[N, K] is K-major B
  using A = cutlass::layout::RowMajor;
  using B = cutlass::layout::ColumnMajor;
};
template <>
struct RoleLayouts<Role::kDgrad> {  // dY row-major, W[N, K] read N-major as B (K x N rows)
  using A = cutlass::layout::RowMajor;
  using B = cutlass::layout::RowMajor;
};
template <>
struct RoleLayouts<Role::kWgrad> {  // dYᵀ is M-major A, X is N-major B
  using A = cutlass::layout::ColumnMajor;
  using B = cutlass::layout::RowMajor;
};

template <Role R, class ElementIn, class ElementOut, class Config>
struct GroupedGemm {
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  using Shape = typename ProblemShape::UnderlyingProblemShape;
  using LayoutA = typename RoleLayouts<R>::A;
  using LayoutB = typename RoleLayouts<R>::B;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignIn = 128 / cutlass::sizeof_bits<ElementIn>::value;
  static constexpr int kAlignOut = 128 / cutlass::sizeof_bits<ElementOut>::value;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Config::TileShape,
      typename Config::ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      ElementOut, LayoutD*, kAlignOut, ElementOut, LayoutD*, kAlignOut,
      typename Config::EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<ElementOut, float, ElementOut, float>>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementIn, LayoutA*, kAlignIn, ElementIn,
      LayoutB*, kAlignIn, float, typename Config::TileShape, typename Config::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      typename Config::KernelSchedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideC = typename Kernel::InternalStrideC;
  using StrideD = typename Kernel::InternalStrideD;

  // The per-group argument arrays, carved from one workspace block.
  struct Arrays {
    Shape* problems;
    const ElementIn** ptr_a;
    const ElementIn** ptr_b;
    ElementOut** ptr_d;
    StrideA* stride_a;
    StrideB* stride_b;
    StrideC* stride_c;
    StrideD* stride_d;
    ElementIn* zeros;  // wgrad: operand of empty groups, so they compute exact zeros
    int64_t zeros_count;
    void* cutlass_workspace;
  };
};

// Arguments of the setup kernel, passed by value. Host group sizes ride along
// (4 KiB), so a host m_splits costs no copy.
struct SetupArgs {
  int num_groups;
  int64_t total_rows, n, k;
  const void* device_sizes;
  bool device_sizes_int64;
  const void* a;
  const void* b;
  void* d;
  int32_t host_sizes[kMaxHostGroups];
};

// One block: scan the group sizes, then write each group's shape, pointers
// and strides. Sizes from the device are clamped (negative -> 0, rows past T
// dropped) so bad device input cannot make the GEMM read or write out of
// bounds; host sizes were validated before the launch.
template <Role R, class GG, class ElementIn, class ElementOut>
__global__ void setup_grouped_arguments(SetupArgs args, typename GG::Arrays out) {
  __shared__ int64_t scan[kMaxGroups];
  const int g = threadIdx.x;
  int64_t size = 0;
  if (g < args.num_groups) {
    if (args.device_sizes == nullptr)
      size = args.host_sizes[g];
    else if (args.device_sizes_int64)
      size = static_cast<const int64_t*>(args.device_sizes)[g];
    else
      size = static_cast<const int32_t*>(args.device_sizes)[g];
    size = size < 0 ? 0 : size;
  }
  scan[g] = size;
  __syncthreads();
  for (int step = 1; step < blockDim.x; step <<= 1) {
    const int64_t add = g >= step ? scan[g - step] : 0;
    __syncthreads();
    scan[g] += add;
    __syncthreads();
  }
  for (int64_t i = g; i < out.zeros_count; i += blockDim.x) out.zeros[i] = ElementIn(0.f);
  if (g >= args.num_groups) return;

  const int64_t begin = min(scan[g] - size, args.total_rows);
  const int64_t end = min(scan[g], args.total_rows);
  const int m = static_cast<int>(end - begin);
  const int n = static_cast<int>(args.n), k = static_cast<int>(args.k);
  const ElementIn* a = static_cast<const ElementIn*>(args.a);
  const ElementIn* b = static_cast<const ElementIn*>(args.b);
  ElementOut* d = static_cast<ElementOut*>(args.d);

  int gm, gn, gk;
  if constexpr (R == Role::kForward) {
    gm = m, gn = n, gk = k;
    out.ptr_a[g] = a + begin * k;
    out.ptr_b[g] = b + static_cast<int64_t>(g) * n * k;
    out.ptr_d[g] = d + begin * n;
  } else if constexpr (R == Role::kDgrad) {
    gm = m, gn = k, gk = n;
    out.ptr_a[g] = a + begin * n;
    out.ptr_b[g] = b + static_cast<int64_t>(g) * n * k;
    out.ptr_d[g] = d + begin * k;
  } else {
    gm = n, gn = k, gk = m;
    out.ptr_a[g] = a + begin * n;
    out.ptr_b[g] = b + begin * k;
    out.ptr_d[g] = d + static_cast<int64_t>(g) * n * k;
    if (m == 0) {  // CUTLASS leaves accumulators unset for K = 0: multiply zeros instead
      gk = 1;
      out.ptr_a[g] = out.zeros;
      out.ptr_b[g] = out.zeros;
    }
  }
  out.problems[g] = cute::make_shape(gm, gn, gk);
  out.stride_a[g] = cutlass::make_cute_packed_stride(typename GG::StrideA{}, cute::make_shape(gm, gk, 1));
  out.stride_b[g] = cutlass::make_cute_packed_stride(typename GG::StrideB{}, cute::make_shape(gn, gk, 1));
  out.stride_c[g] = cutlass::make_cute_packed_stride(typename GG::StrideC{}, cute::make_shape(gm, gn, 1));
  out.stride_d[g] = cutlass::make_cute_packed_stride(typename GG::StrideD{}, cute::make_shape(gm, gn, 1));
}

inline size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

template <Role R, class ElementIn, class ElementOut, class Config>
struct GroupedGemmRunner {
  using GG = GroupedGemm<R, ElementIn, ElementOut, Config>;
  using Gemm = typename GG::Gemm;

  static int64_t zeros_count(const GroupedLaunch& l) {
    return R == Role::kWgrad ? std::max(l.n, l.k) : 0;
  }

  static typename Gemm::Arguments arguments(const GroupedLaunch& l, const typename GG::Arrays& arrays) {
    typename Gemm::Arguments args;
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = {l.num_groups, arrays.problems, nullptr};
    args.mainloop = {arrays.ptr_a, arrays.stride_a, arrays.ptr_b, arrays.stride_b};
    auto& fusion = args.epilogue.thread;
    fusion.alpha = 1.f;
    fusion.beta = l.beta;
    fusion.alpha_ptr = nullptr;
    fusion.beta_ptr = nullptr;
    args.epilogue.ptr_C = const_cast<const ElementOut**>(arrays.ptr_d);
    args.epilogue.dC = arrays.stride_c;
    args.epilogue.ptr_D = arrays.ptr_d;
    args.epilogue.dD = arrays.stride_d;
    args.hw_info.sm_count = l.sm_count;
    cudaGetDevice(&args.hw_info.device_id);
    return args;
  }

  // Lays out the argument arrays in `base`; returns the bytes used before
  // CUTLASS's own workspace.
  static size_t carve(const GroupedLaunch& l, void* base, typename GG::Arrays* arrays) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(base);  // may be 0 when only sizing
    size_t offset = 0;
    auto take = [&](size_t bytes) {
      void* at = reinterpret_cast<void*>(p + offset);
      offset += align_up(bytes);
      return at;
    };
    const size_t g = static_cast<size_t>(l.num_groups);
    arrays->problems = static_cast<typename GG::Shape*>(take(g * sizeof(typename GG::Shape)));
    arrays->ptr_a = static_cast<const ElementIn**>(take(g * sizeof(void*)));
    arrays->ptr_b = static_cast<const ElementIn**>(take(g * sizeof(void*)));
    arrays->ptr_d = static_cast<ElementOut**>(take(g * sizeof(void*)));
    arrays->stride_a = static_cast<typename GG::StrideA*>(take(g * sizeof(typename GG::StrideA)));
    arrays->stride_b = static_cast<typename GG::StrideB*>(take(g * sizeof(typename GG::StrideB)));
    arrays->stride_c = static_cast<typename GG::StrideC*>(take(g * sizeof(typename GG::StrideC)));
    arrays->stride_d = static_cast<typename GG::StrideD*>(take(g * sizeof(typename GG::StrideD)));
    arrays->zeros_count = zeros_count(l);
    arrays->zeros = static_cast<ElementIn*>(take(arrays->zeros_count * sizeof(ElementIn)));
    arrays->cutlass_workspace = reinterpret_cast<void*>(p + offset);
    return offset;
  }

  static size_t workspace_size(const GroupedLaunch& l) {
    typename GG::Arrays arrays{};
    const size_t own = carve(l, nullptr, &arrays);
    return own + align_up(Gemm::get_workspace_size(arguments(l, arrays)));
  }

  static void run(const GroupedLaunch& l, void* workspace) {
    typename GG::Arrays arrays{};
    carve(l, workspace, &arrays);

    SetupArgs setup{};
    setup.num_groups = l.num_groups;
    setup.total_rows = l.total_rows;
    setup.n = l.n;
    setup.k = l.k;
    setup.device_sizes = l.device_sizes;
    setup.device_sizes_int64 = l.device_sizes_int64;
    setup.a = l.a;
    setup.b = l.b;
    setup.d = l.d;
    if (l.device_sizes == nullptr)
      for (int g = 0; g < l.num_groups; ++g) setup.host_sizes[g] = static_cast<int32_t>(l.host_sizes[g]);
    const int threads = std::max(32, (l.num_groups + 31) / 32 * 32);
    setup_grouped_arguments<R, GG, ElementIn, ElementOut><<<1, threads, 0, l.stream>>>(setup, arrays);
    GL_CUDA_CHECK_LAUNCH();

    Gemm gemm;
    const auto args = arguments(l, arrays);
    cutlass::Status status = gemm.initialize(args, arrays.cutlass_workspace, l.stream);
    GL_CHECK(status == cutlass::Status::kSuccess, "CUTLASS grouped GEMM initialize failed: ",
             cutlassGetStatusString(status));
    status = gemm.run(l.stream);
    GL_CHECK(status == cutlass::Status::kSuccess, "CUTLASS grouped GEMM launch failed: ",
             cutlassGetStatusString(status));
    GL_CUDA_CHECK_LAUNCH();
  }

  static KernelEntry entry() { return KernelEntry{&workspace_size, &run}; }
};

}  // namespace grouped_linear::cuda::sm90
