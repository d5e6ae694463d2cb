// The kernel family behind grouped_gemm_sm90.h: a CUTLASS 3 pointer-array
// grouped GEMM (TMA loads, wgmma, warp-specialized persistent CTAs, the
// grouped tile scheduler reading problem shapes on the device), entered
// through our own __global__ that first writes the per-group arguments.
// Each instantiation lives in its own .cu file so they compile in parallel.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/device_kernel.h>
#include <cute/tensor.hpp>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <atomic>
#include <type_traits>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/cuda/dependent_launch.h"
#include "core/cuda/sm90/grouped_gemm_sm90.h"
#include "core/cuda/sm90/l2_promotion.h"
#include "core/fp8/fp8_tensor.h"

namespace grouped_linear::cuda::sm90 {

// Tile and schedule of one kernel. Cooperative: two consumer warpgroups share
// one tile (each takes half its rows); Pingpong: each warpgroup owns a whole
// tile and the two alternate, so one's epilogue overlaps the other's MMAs.
template <int TileM, int TileN, int TileK, int ClusterM, bool Cooperative>
struct TileConfig {
  static constexpr int kTileM = TileM;
  static constexpr int kTileN = TileN;
  static constexpr bool kBlockScaled = false;
  static constexpr bool kFastAccumulation = false;  // FP8: promote partial sums to fp32
  // dgrad/wgrad: whether the epilogue can read D back as C (beta = 1, for
  // main_grad accumulation); false frees the C staging in shared memory.
  static constexpr bool kReadsSource = true;
  using EpilogueTile = cutlass::epilogue::collective::EpilogueTileAuto;
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::_1, cute::_1>;
  using KernelSchedule =
      std::conditional_t<Cooperative, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                         cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong>;
  using EpilogueSchedule =
      std::conditional_t<Cooperative, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
                         cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>;
};

// FP8 with blockwise scales (Float8BlockScaling): CUTLASS's pointer-array
// blockwise mainloop scales each 128-deep k-block's partial sums by
// sfa[row] * sfb[col] before adding them to the fp32 accumulators, so the
// k-tile is one scale block deep and the epilogue applies no alpha.
template <int TileM, int TileN>
struct BlockScaledTileConfig {
  static constexpr int kTileM = TileM;
  static constexpr int kTileN = TileN;
  static constexpr bool kBlockScaled = true;
  static constexpr bool kFastAccumulation = false;
  static constexpr bool kReadsSource = true;
  using EpilogueTile = cutlass::epilogue::collective::EpilogueTileAuto;
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::_128>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};

// Scale layouts of the block-scaled kernels (core/fp8/fp8_tensor.h). The
// activations' scales (A: X or dY, one per row and 128-deep k block; wgrad's
// B: X, the same) are block-major, MN-major in CUTLASS's terms: a k block's
// scales of all rows are adjacent, so the producer warp's 32 threads that
// load a tile's 128 row scales of a k block read 4 sectors, not 32 as
// K-major scales cost (each row's own sector: 86% of the blockwise
// forward's global-load sectors were such excess, benchmarks/reading.md,
// 2026-12-07 evening). The weights' scales (fwd, dgrad B: one per
// 128 x 128 block, one value a k block for a 128-column tile) stay K-major.
template <Role R>
struct BlockScaleLayouts {
  static constexpr int kGranularityN = R == Role::kWgrad ? 1 : 128;
  using Config =
      cutlass::detail::Sm90BlockwiseScaleConfig<1, kGranularityN, 128, cute::GMMA::Major::MN,
                                                R == Role::kWgrad ? cute::GMMA::Major::MN
                                                                  : cute::GMMA::Major::K>;
  using LayoutSFA = decltype(Config::deduce_layoutSFA());
  using LayoutSFB = decltype(Config::deduce_layoutSFB());
};

// ((granularity, row blocks), (128, k blocks), 1) with rows and k blocks
// the given strides apart: one group's layout of the types above (whose
// static strides, 1 or 0, the dynamic values here must equal).
template <class LayoutSF, int Granularity>
__device__ LayoutSF group_scale_layout(int rows, int k, int64_t row_stride, int64_t block_stride) {
  const int row_blocks = (rows + Granularity - 1) / Granularity, k_blocks = (k + 127) / 128;
  auto stride_or_static = [](auto static_stride, int64_t value) {
    if constexpr (cute::is_static<decltype(static_stride)>::value)
      return static_stride;
    else
      return static_cast<int32_t>(value);
  };
  using Stride = std::decay_t<decltype(std::declval<const LayoutSF&>().stride())>;
  return LayoutSF(
      cute::make_shape(cute::make_shape(cute::Int<Granularity>{}, row_blocks),
                       cute::make_shape(cute::_128{}, k_blocks), 1),
      cute::make_stride(
          cute::make_stride(cute::_0{}, stride_or_static(cute::get<0, 1>(Stride{}), row_stride)),
          cute::make_stride(cute::_0{}, stride_or_static(cute::get<1, 1>(Stride{}), block_stride)),
          0));
}

// CUTLASS 4.2's pointer-array blockwise mainloop takes per-group scale
// layouts as arguments but rebuilds each group's layout from its problem
// shape (packed per group) when it switches groups. The activations' scales
// are not packed per group (a k block's scales of all T rows, or of all
// column-wise blocks, are adjacent, so a group's k blocks lie T or C floats
// apart), so this mainloop reads the group's layout from the argument array
// instead, which the setup writes for every role.
template <class Base>
struct StridedScaleMainloop : Base {
  template <class InputTensors, class ProblemShapeMNKL>
  CUTLASS_DEVICE InputTensors tensors_perform_update(InputTensors const&,
                                                     typename Base::Params const& params,
                                                     ProblemShapeMNKL problem_shape_mnkl,
                                                     int32_t next_batch) {
    const float* sfa = params.ptr_SFA[next_batch];
    const float* sfb = params.ptr_SFB[next_batch];
    auto inputs = Base::load_init(problem_shape_mnkl, params, sfa, sfb);
    return cute::make_tuple(
        cute::get<0>(inputs), cute::get<1>(inputs),
        cute::make_tensor(cute::make_gmem_ptr(sfa), params.layout_SFA[next_batch]),
        cute::make_tensor(cute::make_gmem_ptr(sfb), params.layout_SFB[next_batch]));
  }
};

// The mainloop of one kernel: CUTLASS's builder, with scale layouts for the
// block-scaled kernels (a specialization, since the blockwise builder rejects
// 16-bit operands).
template <bool BlockScaled, Role R, class ElementA, class LayoutA, int AlignA, class ElementB,
          class LayoutB, int AlignB, class Config, int Carveout>
struct MainloopFor {
  using type = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA*, AlignA, ElementB,
      LayoutB*, AlignB, float, typename Config::TileShape, typename Config::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<Carveout>,
      typename Config::KernelSchedule>::CollectiveOp;
};
template <Role R, class ElementA, class LayoutA, int AlignA, class ElementB, class LayoutB,
          int AlignB, class Config, int Carveout>
struct MainloopFor<true, R, ElementA, LayoutA, AlignA, ElementB, LayoutB, AlignB, Config,
                   Carveout> {
  using Scales = BlockScaleLayouts<R>;
  using type = StridedScaleMainloop<typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA,
      cute::tuple<LayoutA*, typename Scales::LayoutSFA*>, AlignA, ElementB,
      cute::tuple<LayoutB*, typename Scales::LayoutSFB*>, AlignB, float, typename Config::TileShape,
      typename Config::ClusterShape, cutlass::gemm::collective::StageCountAutoCarveout<Carveout>,
      typename Config::KernelSchedule>::CollectiveOp>;
};

// A configuration may replace the built mainloop by a class derived from it
// (`template <class Built> using Mainloop = ...;`, e.g. a promotion scheme
// of its own); otherwise the built one runs.
template <class Config, class Built, class = void>
struct ConfiguredMainloop {
  using type = Built;
};
template <class Config, class Built>
struct ConfiguredMainloop<Config, Built, std::void_t<typename Config::template Mainloop<Built>>> {
  using type = typename Config::template Mainloop<Built>;
};

// Stand-in for the scale layouts of kernels without block scales.
struct NoScaleLayout {};

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
// FP8 wgmma reads both operands K-major only; the quantized copies are laid
// out for it (core/fp8/fp8_tensor.h): dgrad's B is each Wᵀ [K, N], wgrad's
// A and B are the column-wise copies dYᵀ [N, padded T] and Xᵀ [K, padded T].
struct KMajorLayouts {
  using A = cutlass::layout::RowMajor;
  using B = cutlass::layout::ColumnMajor;
};

// The forward's epilogue: D = alpha_g * acc + bias_g. alpha is 1, or per
// group for FP8 (the product of the operands' scale_inv); the bias row is read
// through a per-group pointer array (a null array adds nothing, so one kernel
// serves layers with and without bias). It reads no C operand.
template <class TileShape, class ElementOut>
using ScaleBiasFusion = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, ElementOut, float,
                                           cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90ScalarBroadcastPtrArray<
        float, cute::Stride<cute::_0, cute::_0, int64_t>>,
    cutlass::epilogue::fusion::Sm90AccFetch,
    cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, ElementOut*, float,
                                                cute::Stride<cute::_0, cute::_1, cute::_0>>>;

template <Role R, class ElementA_, class ElementB_, class ElementOut_, class Config>
struct GroupedGemm {
  using ElementA = ElementA_;
  using ElementB = ElementB_;
  using ElementOut = ElementOut_;
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  using Shape = typename ProblemShape::UnderlyingProblemShape;
  static constexpr bool kFp8 = cutlass::sizeof_bits<ElementA>::value == 8;
  static_assert(kFp8 == (cutlass::sizeof_bits<ElementB>::value == 8), "FP8 operands come in pairs");
  static constexpr bool kBlockScaled = Config::kBlockScaled;
  static_assert(kFp8 || !kBlockScaled, "block scales are for FP8 operands");
  // Per-tensor FP8 applies a_scale_inv * b_scale_inv per group as the
  // epilogue's alpha; block-scaled kernels scale inside the mainloop.
  static constexpr bool kAlpha = kFp8 && !kBlockScaled;
  // Block-scaled wgrad: where each group's column-wise scale blocks start.
  static constexpr bool kColumnScaleBlocks = kBlockScaled && R == Role::kWgrad;
  using Scales = BlockScaleLayouts<R>;
  using LayoutSFA = std::conditional_t<kBlockScaled, typename Scales::LayoutSFA, NoScaleLayout>;
  using LayoutSFB = std::conditional_t<kBlockScaled, typename Scales::LayoutSFB, NoScaleLayout>;
  using Layouts = std::conditional_t<kFp8, KMajorLayouts, RoleLayouts<R>>;
  using LayoutA = typename Layouts::A;
  using LayoutB = typename Layouts::B;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignA = 128 / cutlass::sizeof_bits<ElementA>::value;
  static constexpr int kAlignB = 128 / cutlass::sizeof_bits<ElementB>::value;
  static constexpr int kAlignOut = 128 / cutlass::sizeof_bits<ElementOut>::value;
  // FP8 wgrad reads the column-wise copies, whose groups start at multiples
  // of kGroupAlign columns.
  static constexpr bool kPaddedGroups = kFp8 && R == Role::kWgrad;
  static constexpr int kGroupAlign = static_cast<int>(fp8::kGroupAlign);

  // fwd adds the bias in its epilogue; dgrad and wgrad compute
  // D = alpha * acc + beta * C (beta = 1 accumulates wgrad into main_grad).
  static constexpr bool kBiasEpilogue = R == Role::kForward;
  using FusionOp = std::conditional_t<
      kBiasEpilogue, ScaleBiasFusion<typename Config::TileShape, ElementOut>,
      cutlass::epilogue::fusion::LinearCombination<ElementOut, float, ElementOut, float>>;
  // Kernels without a source read no C (and take only beta = 0).
  static constexpr bool kReadsSource = !kBiasEpilogue && Config::kReadsSource;
  using ElementC = std::conditional_t<kReadsSource, ElementOut, void>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Config::TileShape,
      typename Config::ClusterShape, typename Config::EpilogueTile, float, float, ElementC,
      LayoutD*, kAlignOut, ElementOut, LayoutD*, kAlignOut, typename Config::EpilogueSchedule,
      FusionOp>::CollectiveOp;

  using Mainloop = typename ConfiguredMainloop<
      Config, typename MainloopFor<
                  kBlockScaled, R, ElementA, LayoutA, kAlignA, ElementB, LayoutB, kAlignB, Config,
                  static_cast<int>(sizeof(typename Epilogue::SharedStorage))>::type>::type;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Params = typename Kernel::Params;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideC = typename Kernel::InternalStrideC;
  using StrideD = typename Kernel::InternalStrideD;

  // The per-group argument arrays, carved from one workspace block.
  struct Arrays {
    Shape* problems;
    const ElementA** ptr_a;
    const ElementB** ptr_b;
    ElementOut** ptr_d;
    const ElementOut** ptr_bias;  // fwd with bias: each group's bias row
    StrideA* stride_a;
    StrideB* stride_b;
    StrideC* stride_c;
    StrideD* stride_d;
    float* alpha;  // FP8: per-group dequantization factor, a_scale_inv * b_scale_inv
    // Block-scaled FP8: each group's first scale of A and B, and their layouts.
    const float** ptr_sfa;
    const float** ptr_sfb;
    LayoutSFA* layout_sfa;
    LayoutSFB* layout_sfb;
    void* cutlass_workspace;
  };
};

// Group sizes and operand bases, passed by value. Host group sizes ride along
// (4 KiB), so a host m_splits costs no copy.
struct SetupArgs {
  int num_groups;
  int64_t total_rows, n, k;
  const void* device_sizes;
  bool device_sizes_int64;
  const void* a;
  const void* b;
  void* d;
  const void* bias;  // fwd: [G, N] or null
  // FP8: the operands' scale_inv, A per tensor, B per tensor or per group.
  const float* a_scale_inv;
  const float* b_scale_inv;
  bool b_scale_per_group;
  int64_t padded_columns;  // FP8 wgrad: width of the column-wise copies
  bool accumulate;         // wgrad: beta = 1 (main_grad); empty groups then keep D as it is
  // 16-byte aligned: stage_group_sizes reads it four entries at a time.
  alignas(16) int32_t host_sizes[kMaxHostGroups];
};

// Group g's size from the device list (int32 or int64), negative read as 0.
// Host sizes are read four at a time by stage_group_sizes instead.
__device__ inline int64_t device_group_rows(const SetupArgs& args, int g) {
  const int64_t size = args.device_sizes_int64 ? static_cast<const int64_t*>(args.device_sizes)[g]
                                               : static_cast<const int32_t*>(args.device_sizes)[g];
  return size < 0 ? 0 : size;
}

// Every group's size (negative read as 0) into `sizes` in shared memory,
// once, by all threads; a __syncthreads() must follow. Host sizes are kernel
// parameters, which live in the constant bank: it serves a warp one address
// at a time, so lanes reading different entries queue behind each other
// (reading a list's sizes this way cost the tiny host-table GEMM at G = 128
// about 2 us of GPU time against device sizes). Here each warp reads 16
// bytes at one address for all its lanes and four lanes keep an entry each.
__device__ inline void stage_group_sizes(const SetupArgs& args, int64_t* sizes) {
  const int groups = args.num_groups;
  if (args.device_sizes != nullptr) {
    for (int g = threadIdx.x; g < groups; g += blockDim.x) sizes[g] = device_group_rows(args, g);
    return;
  }
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int4* quads = reinterpret_cast<const int4*>(args.host_sizes);
  for (int q = threadIdx.x / 32; q * 4 < groups; q += warps) {
    const int4 four = quads[q];
    const int g = q * 4 + lane;
    if (lane < 4 && g < groups) {
      const int32_t size = lane == 0 ? four.x : lane == 1 ? four.y : lane == 2 ? four.z : four.w;
      sizes[g] = size < 0 ? 0 : size;
    }
  }
}

// wgrad, beta = 0: the weight gradient of an empty group (no rows) is zero.
// Such groups get no GEMM tiles; every thread of the grid instead stores a
// share of their zeros, 16 bytes at a time where D allows. (They used to
// multiply a zero operand that each CTA wrote into the workspace and TMA
// read back; under blockwise scales the first tiles still read the old bytes
// in a few steps of a thousand on the H200, NaN weight gradients of empty
// groups, so the GEMM no longer reads anything written in the same launch.)
template <class GG>
__device__ void zero_empty_groups(const SetupArgs& args, const int64_t* sizes,
                                  const int64_t* begins, typename GG::ElementOut* d) {
  using ElementOut = typename GG::ElementOut;
  const int64_t cta =
      blockIdx.x + static_cast<int64_t>(gridDim.x) * (blockIdx.y + gridDim.y * blockIdx.z);
  const int64_t threads = static_cast<int64_t>(gridDim.x) * gridDim.y * gridDim.z * blockDim.x;
  const int64_t first = cta * blockDim.x + threadIdx.x;
  const int64_t elements = args.n * args.k;
  for (int g = 0; g < args.num_groups; ++g) {
    // Empty as the per-group arguments see it: no rows, or all past T.
    if (sizes[g] > 0 && begins[g] < args.total_rows) continue;
    ElementOut* out = d + static_cast<int64_t>(g) * elements;
    const bool wide = reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                      (elements * static_cast<int64_t>(sizeof(ElementOut))) % 16 == 0;
    if (wide) {
      uint4* out16 = reinterpret_cast<uint4*>(out);
      const int64_t vectors = elements * static_cast<int64_t>(sizeof(ElementOut)) / 16;
      for (int64_t i = first; i < vectors; i += threads) out16[i] = make_uint4(0, 0, 0, 0);
    } else {
      for (int64_t i = first; i < elements; i += threads) out[i] = ElementOut(0.f);
    }
  }
}

// Run by every CTA before its GEMM work: stage the group sizes in shared
// memory (stage_group_sizes), scan them (warp 0, in `scratch`), then write each group's shape,
// pointers and strides. Every CTA writes the same values, and reads only after its own writes, so
// no CTA depends on another and no second launch is needed. Device sizes are clamped (negative ->
// 0, rows past T dropped) so bad device input cannot make the GEMM read or write out of bounds;
// host sizes were validated.
template <Role R, class GG>
__device__ void write_group_arguments(const SetupArgs& args, const typename GG::Arrays& out,
                                      int64_t* scratch) {
  using ElementA = typename GG::ElementA;
  using ElementB = typename GG::ElementB;
  using ElementOut = typename GG::ElementOut;
  const int groups = args.num_groups;
  int64_t* sizes = scratch + 3 * groups + 1;
  stage_group_sizes(args, sizes);
  __syncthreads();
  auto size_of = [&](int g) { return sizes[g]; };
  // Where group g's rows start: in the rows of T, (FP8 wgrad) in the
  // columns of the column-wise copies, each group rounded up to kGroupAlign,
  // and (block-scaled wgrad) in the columns of their scales, each group a
  // whole number of 128-column blocks. Groups past T get the prefixes of
  // unclamped sizes; they are empty below, so nothing reads them.
  int64_t* begins = scratch;
  int64_t* padded_begins = scratch + groups;
  int64_t* block_begins = scratch + 2 * groups;
  int64_t* any_empty = scratch + 3 * groups;  // whether a group has no rows (within T)

  // Warp 0: lane l sums a contiguous chunk, the lanes scan their sums with
  // shuffles, then each lane writes its chunk's exclusive prefixes.
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const int chunk = (groups + 31) / 32;
    const int first = lane * chunk, last = min(first + chunk, groups);
    auto padded = [](int64_t rows) {
      return (rows + GG::kGroupAlign - 1) / GG::kGroupAlign * GG::kGroupAlign;
    };
    auto blocks = [](int64_t rows) { return (rows + 127) / 128; };
    int64_t sum = 0, padded_sum = 0, block_sum = 0;
    for (int g = first; g < last; ++g) {
      sum += size_of(g);
      if constexpr (GG::kPaddedGroups) padded_sum += padded(size_of(g));
      if constexpr (GG::kColumnScaleBlocks) block_sum += blocks(size_of(g));
    }
    int64_t inclusive = sum, padded_inclusive = padded_sum, block_inclusive = block_sum;
    for (int step = 1; step < 32; step <<= 1) {
      const int64_t up = __shfl_up_sync(0xffffffffu, inclusive, step);
      const int64_t padded_up = __shfl_up_sync(0xffffffffu, padded_inclusive, step);
      const int64_t block_up = __shfl_up_sync(0xffffffffu, block_inclusive, step);
      if (lane >= step) inclusive += up, padded_inclusive += padded_up, block_inclusive += block_up;
    }
    int64_t begin = inclusive - sum, padded_begin = padded_inclusive - padded_sum;
    int64_t block_begin = block_inclusive - block_sum;
    bool empty = false;
    for (int g = first; g < last; ++g) {
      empty = empty || size_of(g) == 0 || begin >= args.total_rows;
      begins[g] = begin;
      begin += size_of(g);
      if constexpr (GG::kPaddedGroups) {
        padded_begins[g] = padded_begin;
        padded_begin += padded(size_of(g));
      }
      if constexpr (GG::kColumnScaleBlocks) {
        block_begins[g] = block_begin;
        block_begin += blocks(size_of(g));
      }
    }
    empty = __any_sync(0xffffffffu, empty);
    if (lane == 0) *any_empty = empty;
  }
  __syncthreads();

  const ElementA* a = static_cast<const ElementA*>(args.a);
  const ElementB* b = static_cast<const ElementB*>(args.b);
  ElementOut* d = static_cast<ElementOut*>(args.d);
  const int n = static_cast<int>(args.n), k = static_cast<int>(args.k);
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {
    const int64_t begin = min(begins[g], args.total_rows);
    const int64_t end = min(begins[g] + size_of(g), args.total_rows);
    const int m = static_cast<int>(end - begin);
    int gm, gn, gk;
    if constexpr (R == Role::kForward) {
      gm = m, gn = n, gk = k;
      out.ptr_a[g] = a + begin * k;
      out.ptr_b[g] = b + static_cast<int64_t>(g) * n * k;
      out.ptr_d[g] = d + begin * n;
      if (args.bias != nullptr)
        out.ptr_bias[g] = static_cast<const ElementOut*>(args.bias) + static_cast<int64_t>(g) * n;
    } else if constexpr (R == Role::kDgrad) {
      gm = m, gn = k, gk = n;
      out.ptr_a[g] = a + begin * n;
      out.ptr_b[g] = b + static_cast<int64_t>(g) * n * k;  // W_g, or W_gᵀ for FP8: same size
      out.ptr_d[g] = d + begin * k;
    } else {
      gm = n, gn = k, gk = m;
      // 16-bit: dY_g and X_g start at row `begin`; FP8: the column-wise
      // copies dYᵀ and Xᵀ, where group g starts at column padded_begins[g]
      // and its reduction runs over its zero padding too, up to a multiple
      // of kGroupAlign (32 bytes): the same sums, and loads whose extent is
      // not an odd multiple of 16 bytes, which TMA reads more slowly.
      if constexpr (GG::kPaddedGroups)
        gk = (m + GG::kGroupAlign - 1) / GG::kGroupAlign * GG::kGroupAlign;
      const int64_t at = GG::kPaddedGroups ? padded_begins[g] : begin;
      const int64_t a_step = GG::kPaddedGroups ? 1 : n, b_step = GG::kPaddedGroups ? 1 : k;
      out.ptr_a[g] = a + at * a_step;
      out.ptr_b[g] = b + at * b_step;
      out.ptr_d[g] = d + static_cast<int64_t>(g) * n * k;
      // An empty group (K = 0) gets no tiles: CUTLASS would leave its
      // accumulators unset. Its D is written below (zeros) or kept (main_grad).
      if (m == 0) gm = 0, gk = 1;
    }
    out.problems[g] = cute::make_shape(gm, gn, gk);
    auto stride_a =
        cutlass::make_cute_packed_stride(typename GG::StrideA{}, cute::make_shape(gm, gk, 1));
    auto stride_b =
        cutlass::make_cute_packed_stride(typename GG::StrideB{}, cute::make_shape(gn, gk, 1));
    if constexpr (GG::kPaddedGroups) {
      // Rows of the column-wise copies are padded_columns apart.
      cute::get<0>(stride_a) = args.padded_columns;
      cute::get<0>(stride_b) = args.padded_columns;
    }
    out.stride_a[g] = stride_a;
    out.stride_b[g] = stride_b;
    out.stride_c[g] =
        cutlass::make_cute_packed_stride(typename GG::StrideC{}, cute::make_shape(gm, gn, 1));
    out.stride_d[g] =
        cutlass::make_cute_packed_stride(typename GG::StrideD{}, cute::make_shape(gm, gn, 1));
    if constexpr (GG::kAlpha)
      out.alpha[g] = args.a_scale_inv[0] * args.b_scale_inv[args.b_scale_per_group ? g : 0];
    if constexpr (GG::kBlockScaled) {
      using LayoutSFA = typename GG::LayoutSFA;
      using LayoutSFB = typename GG::LayoutSFB;
      constexpr int kGranularityN = GG::Scales::kGranularityN;
      const int64_t block_begin = GG::kColumnScaleBlocks ? block_begins[g] : 0;
      const GroupBlockScales at_g =
          group_block_scales(R, g, begin, block_begin, n, k, args.total_rows);
      out.ptr_sfa[g] = args.a_scale_inv + at_g.a_offset;
      out.ptr_sfb[g] = args.b_scale_inv + at_g.b_offset;
      out.layout_sfa[g] =
          group_scale_layout<LayoutSFA, 1>(gm, gk, at_g.a_row_stride, at_g.a_block_stride);
      out.layout_sfb[g] = group_scale_layout<LayoutSFB, kGranularityN>(gn, gk, at_g.b_row_stride,
                                                                       at_g.b_block_stride);
    }
  }
  if constexpr (R == Role::kWgrad) {
    if (!args.accumulate && *any_empty != 0) zero_empty_groups<GG>(args, sizes, begins, d);
  }
  // The GEMM reads the arrays with ordinary loads after the barrier, which
  // the barrier alone orders. The GPU-scope and async-proxy fences stay as a
  // guard: no async-proxy reader (TMA) may see the workspace's old bytes.
  // The scan's scratch is the start of the mainloop's shared buffers, which
  // TMA (the async proxy) writes next: PTX orders generic-proxy accesses
  // before async-proxy ones to the same shared memory only through a proxy
  // fence, so each thread fences its own reads and writes before the barrier.
  __threadfence();
  asm volatile("fence.proxy.async.global;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
}

// The kernel: argument setup, then CUTLASS's GEMM in the same CTA. Launch
// bounds and the grid-constant Params match cutlass::device_kernel.
template <Role R, class GG>
__global__ __launch_bounds__(
    GG::Kernel::MaxThreadsPerBlock,
    GG::Kernel::MinBlocksPerMultiprocessor) void grouped_gemm_kernel(CUTLASS_GRID_CONSTANT
                                                                     typename GG::Params const
                                                                         params,
                                                                     CUTLASS_GRID_CONSTANT
                                                                         SetupArgs const setup,
                                                                     CUTLASS_GRID_CONSTANT
                                                                     typename GG::Arrays const
                                                                         arrays) {
  // Dynamic shared memory only: a static __shared__ here would shift the
  // base of CUTLASS's shared storage off the alignment its swizzles need.
  extern __shared__ char smem[];
  enter_dependent_grid();
  write_group_arguments<R, GG>(setup, arrays, reinterpret_cast<int64_t*>(smem));
  typename GG::Kernel op;
  op(params, smem);
}

template <class Element>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<Element, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<Element, cutlass::bfloat16_t>) return DType::kBFloat16;
  if constexpr (std::is_same_v<Element, cutlass::half_t>) return DType::kFloat16;
  if constexpr (std::is_same_v<Element, cutlass::float_e4m3_t>) return DType::kFloat8E4M3;
  if constexpr (std::is_same_v<Element, cutlass::float_e5m2_t>) return DType::kFloat8E5M2;
}

inline size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

template <Role R, class ElementA, class ElementB, class ElementOut, class Config>
struct GroupedGemmRunner {
  using GG = GroupedGemm<R, ElementA, ElementB, ElementOut, Config>;
  using Kernel = typename GG::Kernel;
  using Params = typename GG::Params;
  static constexpr int kSharedBytes = Kernel::SharedStorageSize;
  static_assert(kSharedBytes >= (4 * kMaxGroups + 1) * static_cast<int>(sizeof(int64_t)),
                "the group-size scan borrows the GEMM's shared memory");

  static typename Kernel::Arguments arguments(const GroupedLaunch& l,
                                              const typename GG::Arrays& arrays) {
    typename Kernel::Arguments args;
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = {l.num_groups, arrays.problems, nullptr};
    if constexpr (GG::kBlockScaled)
      args.mainloop = {arrays.ptr_a,   arrays.stride_a,   arrays.ptr_b,   arrays.stride_b,
                       arrays.ptr_sfa, arrays.layout_sfa, arrays.ptr_sfb, arrays.layout_sfb};
    else
      args.mainloop = {arrays.ptr_a, arrays.stride_a, arrays.ptr_b, arrays.stride_b};
    // alpha: 1, or per-tensor FP8's per-group factor read from arrays.alpha[g].
    float* const alpha_array = GG::kAlpha ? arrays.alpha : nullptr;
    const cute::Stride<cute::_0, cute::_0, int64_t> per_group{cute::_0{}, cute::_0{}, 1};
    if constexpr (GG::kBiasEpilogue) {
      // {alpha, acc, bias row, alpha * acc + bias}; a null bias array adds nothing.
      args.epilogue.thread = {{{1.f}, {alpha_array}, {nullptr}, {per_group}},
                              {},
                              {l.bias != nullptr ? arrays.ptr_bias : nullptr, ElementOut(0.f), {}},
                              {}};
      args.epilogue.ptr_C = nullptr;
    } else {
      auto& fusion = args.epilogue.thread;
      fusion.alpha = 1.f;
      fusion.beta = l.beta;
      fusion.alpha_ptr = alpha_array;
      fusion.dAlpha = per_group;
      fusion.beta_ptr = nullptr;
      if constexpr (GG::kReadsSource)
        args.epilogue.ptr_C = const_cast<const ElementOut**>(arrays.ptr_d);
      else
        args.epilogue.ptr_C = nullptr;
    }
    args.epilogue.dC = arrays.stride_c;
    args.epilogue.ptr_D = arrays.ptr_d;
    args.epilogue.dD = arrays.stride_d;
    args.hw_info.device_id = l.device;
    args.hw_info.sm_count = l.sm_count;
    using RasterOrder = decltype(args.scheduler.raster_order);
    args.scheduler.raster_order = l.raster_along_n ? RasterOrder::AlongN : RasterOrder::AlongM;
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
    arrays->ptr_a = static_cast<const ElementA**>(take(g * sizeof(void*)));
    arrays->ptr_b = static_cast<const ElementB**>(take(g * sizeof(void*)));
    arrays->ptr_d = static_cast<ElementOut**>(take(g * sizeof(void*)));
    arrays->ptr_bias = static_cast<const ElementOut**>(take(g * sizeof(void*)));
    arrays->stride_a = static_cast<typename GG::StrideA*>(take(g * sizeof(typename GG::StrideA)));
    arrays->stride_b = static_cast<typename GG::StrideB*>(take(g * sizeof(typename GG::StrideB)));
    arrays->stride_c = static_cast<typename GG::StrideC*>(take(g * sizeof(typename GG::StrideC)));
    arrays->stride_d = static_cast<typename GG::StrideD*>(take(g * sizeof(typename GG::StrideD)));
    arrays->alpha = static_cast<float*>(take(GG::kAlpha ? g * sizeof(float) : 0));
    const size_t scaled = GG::kBlockScaled ? g : 0;
    arrays->ptr_sfa = static_cast<const float**>(take(scaled * sizeof(void*)));
    arrays->ptr_sfb = static_cast<const float**>(take(scaled * sizeof(void*)));
    arrays->layout_sfa =
        static_cast<typename GG::LayoutSFA*>(take(scaled * sizeof(typename GG::LayoutSFA)));
    arrays->layout_sfb =
        static_cast<typename GG::LayoutSFB*>(take(scaled * sizeof(typename GG::LayoutSFB)));
    arrays->cutlass_workspace = reinterpret_cast<void*>(p + offset);
    return offset;
  }

  static size_t workspace_size(const GroupedLaunch& l) {
    typename GG::Arrays arrays{};
    const size_t own = carve(l, nullptr, &arrays);
    return own + align_up(Kernel::get_workspace_size(arguments(l, arrays)));
  }

  // CUTLASS's Params hold the argument-array pointers and CUTLASS's own
  // workspace (all inside our workspace), the group count, beta or whether
  // there is a bias, the tile order, and tensor maps built from placeholder
  // shapes; nothing else of the call. The caching allocator hands a
  // same-sized workspace back at the same address, so in steady state the
  // last Params are reused and the host skips the tensor-map encodes.
  struct ParamsCache {
    bool valid = false;
    int device = -1, num_groups = 0, sm_count = 0;
    float beta = 0.f;
    bool bias = false, raster_along_n = false;
    int l2_promotion_bytes = 128;
    const void* workspace = nullptr;
    // Where CUTLASS's own workspace starts, after the argument arrays (its
    // offset follows the group count today; compared anyway, so that a
    // layout change cannot let reused Params point into the arrays).
    const void* cutlass_workspace = nullptr;
    Params params;
  };

  // The tensor map inside a CUTLASS TMA copy of our own (cached) Params.
  template <class TmaCopy>
  static void* operand_map(const TmaCopy& copy) {
    return const_cast<void*>(static_cast<const void*>(copy.get_tma_descriptor()));
  }

  static const Params& params_for(const GroupedLaunch& l, const typename GG::Arrays& arrays,
                                  const void* workspace) {
    thread_local ParamsCache cache;
    if (cache.valid && cache.device == l.device && cache.workspace == workspace &&
        cache.cutlass_workspace == arrays.cutlass_workspace && cache.num_groups == l.num_groups &&
        cache.beta == l.beta && cache.bias == (l.bias != nullptr) && cache.sm_count == l.sm_count &&
        cache.raster_along_n == l.raster_along_n &&
        cache.l2_promotion_bytes == l.l2_promotion_bytes)
      return cache.params;
    const auto args = arguments(l, arrays);
    GL_CHECK(Kernel::can_implement(args), "CUTLASS grouped GEMM cannot run these arguments (",
             l.num_groups, " groups, n=", l.n, ", k=", l.k, ")");
    const cutlass::Status status =
        Kernel::initialize_workspace(args, arrays.cutlass_workspace, l.stream, nullptr);
    GL_CHECK(status == cutlass::Status::kSuccess,
             "CUTLASS workspace initialisation failed: ", cutlassGetStatusString(status));
    cache.valid = false;
    // The tensor-map encodes below are driver calls: they need the device's
    // context current in this thread, which a thread that has made no runtime
    // call yet (autograd's backward worker, a user thread) does not have.
    GL_CUDA_CHECK(cudaSetDevice(l.device));
    cache.params = Kernel::to_underlying_arguments(args, arrays.cutlass_workspace);
    // CUTLASS encodes its maps with 128-byte promotion. Each CTA copies the
    // mainloop's two maps from these Params before it edits their address
    // and shape per group, so a promotion set here holds for every group.
    if (l.l2_promotion_bytes != 128) {
      set_tensor_map_l2_promotion(operand_map(cache.params.mainloop.tma_load_a),
                                  l.l2_promotion_bytes);
      set_tensor_map_l2_promotion(operand_map(cache.params.mainloop.tma_load_b),
                                  l.l2_promotion_bytes);
    }
    cache.device = l.device;
    cache.workspace = workspace;
    cache.cutlass_workspace = arrays.cutlass_workspace;
    cache.num_groups = l.num_groups;
    cache.beta = l.beta;
    cache.bias = l.bias != nullptr;
    cache.sm_count = l.sm_count;
    cache.raster_along_n = l.raster_along_n;
    cache.l2_promotion_bytes = l.l2_promotion_bytes;
    cache.valid = true;
    return cache.params;
  }

  // The dynamic shared-memory opt-in is a per-device function attribute: set
  // once per device, not per call.
  static void allow_shared_memory(int device) {
    static std::atomic<uint64_t> done{0};
    const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
    if (bit != 0 && (done.load(std::memory_order_acquire) & bit)) return;
    GL_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_kernel<R, GG>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
    done.fetch_or(bit, std::memory_order_release);
  }

  static void run(const GroupedLaunch& l, void* workspace) {
    GL_CHECK_VALUE(GG::kReadsSource || GG::kBiasEpilogue || l.beta == 0.f,
                   "accumulate: this sm90 kernel reads no C operand (beta = 0 only), got beta ",
                   l.beta);
    typename GG::Arrays arrays{};
    carve(l, workspace, &arrays);

    SetupArgs setup;
    setup.num_groups = l.num_groups;
    setup.total_rows = l.total_rows;
    setup.n = l.n;
    setup.k = l.k;
    setup.device_sizes = l.device_sizes;
    setup.device_sizes_int64 = l.device_sizes_int64;
    setup.a = l.a;
    setup.b = l.b;
    setup.d = l.d;
    setup.bias = l.bias;
    setup.a_scale_inv = l.a_scale_inv;
    setup.b_scale_inv = l.b_scale_inv;
    setup.b_scale_per_group = l.b_scale_per_group;
    setup.padded_columns = l.padded_columns;
    setup.accumulate = l.beta != 0.f;
    if (l.device_sizes == nullptr)
      for (int g = 0; g < l.num_groups; ++g)
        setup.host_sizes[g] = static_cast<int32_t>(l.host_sizes[g]);

    const Params& params = params_for(l, arrays, workspace);
    allow_shared_memory(l.device);

    cudaLaunchConfig_t config{};
    config.gridDim = Kernel::get_grid_shape(params);
    config.blockDim = Kernel::get_block_shape();
    config.dynamicSmemBytes = kSharedBytes;
    config.stream = l.stream;
    cudaLaunchAttribute attributes[2]{};
    unsigned count = 0;
    constexpr int kCluster = cute::size(typename Config::ClusterShape{});
    if constexpr (kCluster > 1) {
      attributes[count].id = cudaLaunchAttributeClusterDimension;
      attributes[count].val.clusterDim.x = kCluster;
      attributes[count].val.clusterDim.y = 1;
      attributes[count].val.clusterDim.z = 1;
      ++count;
    }
    // The kernel starts with enter_dependent_grid().
    count += static_cast<unsigned>(dependent_launch_attribute(l.device, &attributes[count]));
    config.attrs = count > 0 ? attributes : nullptr;
    config.numAttrs = count;
    GL_CUDA_CHECK(cudaLaunchKernelEx(&config, grouped_gemm_kernel<R, GG>, params, setup, arrays));
  }

  static KernelEntry entry(const char* name) {
    KernelEntry e;
    e.name = name;
    e.role = R;
    e.input = dtype_of<ElementA>();
    e.input_b = dtype_of<ElementB>();
    e.output = dtype_of<ElementOut>();
    e.block_scaled = GG::kBlockScaled;
    e.fast_accumulation = Config::kFastAccumulation;
    e.reads_source = GG::kReadsSource;
    e.tile_m = Config::kTileM;
    e.tile_n = Config::kTileN;
    e.workspace_size = &workspace_size;
    e.run = &run;
    return e;
  }
};

}  // namespace grouped_linear::cuda::sm90
