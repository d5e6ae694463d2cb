// An epilogue that stores each thread's accumulators straight to global
// memory, with no shared-memory staging and no TMA store.
//
// Why: the TMA epilogue stages every tile in shared memory, syncs the
// consumer warpgroups on named barriers for each piece and, in the
// pointer-array kernels, rewrites its store descriptor whenever a CTA moves
// to another group. Where tiles are short in K (wgrad's reductions of a few
// hundred rows, the forward and dgrad at qwen3's K = 768) that work is a
// large part of a tile's time, and the MMAs of the next tile wait for it.
// A direct store is fire-and-forget: the warps go on to the next tile while
// the stores drain, and the staging's shared memory goes to mainloop stages.
//
// The accumulators are the sm90 GMMA layout: per 64 x N atom a thread holds
// two adjacent columns of one row, of the row 8 below, for each 8-column
// chunk ((2, 2, N / 8) values). 16-bit outputs without a source operand are
// exchanged within each quad of lanes (the four threads of a row) so that
// each thread stores 8 adjacent columns, 16 bytes; other outputs store the
// thread's column pairs (8 bytes for float). Both cover whole 32-byte
// sectors per warp instruction.
//
// D = alpha_g * acc (+ beta * C where beta != 0) (+ bias_g[col], the
// forward), computed in float with the same fused multiply-adds as the
// CUTLASS fusions it stands in for (LinearCombination, the forward's
// ScaleBiasFusion), so the kernels give the same bits.
#pragma once

#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>
#include <cute/tensor.hpp>
#include <cutlass/detail/layout.hpp>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/epilogue/dispatch_policy.hpp>

#include <cstdint>
#include <type_traits>

namespace grouped_linear::cuda::sm90 {

template <class ElementOut_, class ElementC_>
class DirectStoreEpilogue {
 public:
  using EpilogueSchedule = cutlass::epilogue::PtrArrayNoSmemWarpSpecialized;
  using DispatchPolicy = EpilogueSchedule;
  using ElementOutput = ElementOut_;
  using ElementD = ElementOut_;
  using ElementC = ElementC_;  // void: reads no C
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementScalar = float;
  using StrideC = cutlass::detail::TagToStrideC_t<cutlass::layout::RowMajor*>;
  using StrideD = StrideC;
  using InternalStrideC = cute::remove_pointer_t<StrideC>;
  using InternalStrideD = InternalStrideC;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  static constexpr bool kReadsSource = !std::is_void_v<ElementC_>;
  using SourceElement = std::conditional_t<kReadsSource, ElementC_, ElementOut_>;

  struct SharedStorage {};
  using TensorMapStorage = SharedStorage;

  // Named as CUTLASS's LinearCombination arguments, so that the runner fills
  // either the same way; bias is the forward's per-group row (null: none).
  struct ThreadArguments {
    float alpha = 1.f;
    float beta = 0.f;
    const float* alpha_ptr = nullptr;  // per group: alpha_ptr[g * dAlpha_L]
    const float* beta_ptr = nullptr;
    cute::Stride<cute::_0, cute::_0, int64_t> dAlpha{cute::_0{}, cute::_0{}, 0};
    cute::Stride<cute::_0, cute::_0, int64_t> dBeta{cute::_0{}, cute::_0{}, 0};
    const ElementOut_* const* bias_ptr_array = nullptr;
  };
  struct Arguments {
    ThreadArguments thread{};
    ElementC_ const** ptr_C = nullptr;
    StrideC dC{};
    ElementOut_** ptr_D = nullptr;
    StrideD dD{};
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args,
                                                  void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&, int) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*,
                                              cudaStream_t, cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.ptr_D != nullptr;
  }

  CUTLASS_HOST_DEVICE DirectStoreEpilogue(Params const& params) : params_(params) {}

  CUTLASS_DEVICE bool is_source_needed() { return kReadsSource; }

  template <class ProblemShapeMNKL, class TileShapeMNK, class TileCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, TileShapeMNK tile_shape_mnk,
                                 TileCoordMNKL tile_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    static_assert(rank(FrgLayout{}) == 3, "(MMA, MMA_M, MMA_N) accumulators");
    using AtomValues = decltype(shape<0>(FrgLayout{}));
    static_assert(
        rank(AtomValues{}) == 3 && size<0>(AtomValues{}) == 2 && size<1>(AtomValues{}) == 2,
        "sm90 GMMA accumulators: (2 columns, 2 rows, N / 8 chunks) a thread");
    constexpr int kChunks = size<2>(AtomValues{});

    const int rows = static_cast<int>(get<0>(problem_shape_mnkl));
    const int cols = static_cast<int>(get<1>(problem_shape_mnkl));
    const int group = static_cast<int>(get<3>(tile_coord_mnkl));
    const int row0 = static_cast<int>(get<0>(tile_coord_mnkl)) * int(size<0>(tile_shape_mnk));
    const int col0 = static_cast<int>(get<1>(tile_coord_mnkl)) * int(size<1>(tile_shape_mnk));

    const ThreadArguments& op = params_.thread;
    const float alpha =
        op.alpha_ptr != nullptr ? op.alpha_ptr[group * get<2>(op.dAlpha)] : op.alpha;
    float beta = 0.f;
    if constexpr (kReadsSource)
      beta = op.beta_ptr != nullptr ? op.beta_ptr[group * get<2>(op.dBeta)] : op.beta;
    const ElementOut_* bias = op.bias_ptr_array != nullptr ? op.bias_ptr_array[group] : nullptr;
    ElementOut_* d = params_.ptr_D[group];
    const int64_t ld_d = get<0>(params_.dD[group]);
    const SourceElement* c = nullptr;
    int64_t ld_c = 0;
    if constexpr (kReadsSource) {
      if (beta != 0.f) {
        c = params_.ptr_C[group];
        ld_c = get<0>(params_.dC[group]);
      }
    }

    // (row, col) within the tile of each accumulator.
    Tensor coords = tiled_mma.get_thread_slice(thread_idx)
                        .partition_C(make_identity_tensor(take<0, 2>(tile_shape_mnk)));

    // alpha * acc + beta * C[row, col] where C is read (`prior`), else
    // alpha * acc (+ bias[col]), in float.
    auto value = [&](float acc, int col, float prior) {
      if (kReadsSource && c != nullptr) return fmaf(alpha, acc, beta * prior);
      return bias != nullptr ? fmaf(alpha, acc, float(bias[col])) : alpha * acc;
    };

    constexpr bool kQuadExchange = sizeof(ElementOut_) == 2 && !kReadsSource;
    CUTLASS_PRAGMA_UNROLL
    for (int mm = 0; mm < size<1>(accumulators); ++mm) {
      CUTLASS_PRAGMA_UNROLL
      for (int nn = 0; nn < size<2>(accumulators); ++nn) {
        CUTLASS_PRAGMA_UNROLL
        for (int half = 0; half < 2; ++half) {
          if constexpr (kQuadExchange) {
            static_assert(kChunks % 4 == 0, "quads of 8-column chunks");
            const int quad_lane = threadIdx.x & 3;
            CUTLASS_PRAGMA_UNROLL
            for (int q = 0; q < kChunks / 4; ++q) {
              // This thread's column pair of chunks 4q .. 4q+3, packed.
              uint32_t pairs[4];
              const auto first = coords(make_coord(0, half, 4 * q), mm, nn);
              const int row = row0 + int(get<0>(first));
              CUTLASS_PRAGMA_UNROLL
              for (int j = 0; j < 4; ++j) {
                const int col = col0 + int(get<1>(coords(make_coord(0, half, 4 * q + j), mm, nn)));
                cutlass::Array<float, 2> v;
                v[0] = value(accumulators(make_coord(0, half, 4 * q + j), mm, nn), col, 0.f);
                v[1] = value(accumulators(make_coord(1, half, 4 * q + j), mm, nn), col + 1, 0.f);
                const auto packed =
                    cutlass::NumericArrayConverter<ElementOut_, float, 2,
                                                   cutlass::FloatRoundStyle::round_to_nearest>{}(v);
                pairs[j] = reinterpret_cast<const uint32_t&>(packed);
              }
              // Round r: lane t takes from lane (t + r) % 4 of its quad that
              // lane's pair of chunk 4q + t. After four rounds lane t holds
              // chunk 4q + t whole, 8 adjacent columns.
              uint32_t chunk[4] = {0u, 0u, 0u, 0u};
              CUTLASS_PRAGMA_UNROLL
              for (int r = 0; r < 4; ++r) {
                const int give = (quad_lane - r) & 3;
                const uint32_t sent = give == 0   ? pairs[0]
                                      : give == 1 ? pairs[1]
                                      : give == 2 ? pairs[2]
                                                  : pairs[3];
                const int from = (quad_lane + r) & 3;
                const uint32_t got = __shfl_sync(0xffffffffu, sent, (threadIdx.x & 31 & ~3) | from);
                CUTLASS_PRAGMA_UNROLL
                for (int j = 0; j < 4; ++j) chunk[j] = from == j ? got : chunk[j];
              }
              // Chunk 4q + quad_lane starts 8 * quad_lane columns after
              // chunk 4q's, whose pair this lane held at 2 * quad_lane.
              const int col = col0 + int(get<1>(first)) - 2 * quad_lane + 8 * quad_lane;
              if (row < rows) {
                ElementOut_* out = d + row * ld_d + col;
                if (col + 8 <= cols) {
                  *reinterpret_cast<uint4*>(out) =
                      make_uint4(chunk[0], chunk[1], chunk[2], chunk[3]);
                } else {
                  CUTLASS_PRAGMA_UNROLL
                  for (int j = 0; j < 4; ++j) {
                    const auto pair =
                        reinterpret_cast<const cutlass::Array<ElementOut_, 2>&>(chunk[j]);
                    if (col + 2 * j < cols) out[2 * j] = pair[0];
                    if (col + 2 * j + 1 < cols) out[2 * j + 1] = pair[1];
                  }
                }
              }
            }
          } else {
            CUTLASS_PRAGMA_UNROLL
            for (int chunk = 0; chunk < kChunks; ++chunk) {
              const auto at = coords(make_coord(0, half, chunk), mm, nn);
              const int row = row0 + int(get<0>(at)), col = col0 + int(get<1>(at));
              if (row >= rows) continue;
              const float v0 = accumulators(make_coord(0, half, chunk), mm, nn);
              const float v1 = accumulators(make_coord(1, half, chunk), mm, nn);
              ElementOut_* out = d + row * ld_d + col;
              if (col + 1 < cols) {  // both columns: one 4- or 8-byte access
                cutlass::AlignedArray<SourceElement, 2> prior;
                prior.fill(SourceElement(0.f));
                if constexpr (kReadsSource)
                  if (c != nullptr)
                    prior = *reinterpret_cast<const cutlass::AlignedArray<SourceElement, 2>*>(
                        c + row * ld_c + col);
                cutlass::AlignedArray<ElementOut_, 2> pair;
                pair[0] = ElementOut_(value(v0, col, float(prior[0])));
                pair[1] = ElementOut_(value(v1, col + 1, float(prior[1])));
                *reinterpret_cast<cutlass::AlignedArray<ElementOut_, 2>*>(out) = pair;
              } else if (col < cols) {
                float prior = 0.f;
                if constexpr (kReadsSource)
                  if (c != nullptr) prior = float(c[row * ld_c + col]);
                out[0] = ElementOut_(value(v0, col, prior));
              }
            }
          }
        }
      }
    }
  }

 private:
  Params params_;
};

}  // namespace grouped_linear::cuda::sm90
