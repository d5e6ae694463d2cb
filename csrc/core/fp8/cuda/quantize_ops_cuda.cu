// FP8 quantization on CUDA (the contract: core/fp8/quantize_ops.h; the bits:
// quantize_ops_cpu.cpp). One launch per operation, two for current scaling
// (amax, then the cast; a forward's X and W share both); group sizes are
// read on the device when they are there, never copied back.
//
// quantize_activation: a persistent grid walks tiles of 128 rows x 128
// columns. Row tiles start at each group's first row, so a column-wise
// 1 x 128 block is exactly one tile's rows, and tile (row tile, column
// tile) writes its rows into both copies (tiles of 128 columns of 16-bit
// values through the wide paths of quantize_tile.cuh). The fused bias
// gradient writes one partial sum per row tile and column; the last tile of a group to
// finish (an atomic count per group and column tile) adds them in order.
// quantize_weight: the same tiles per group; a 128 x 128 block is a tile.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/cuda/dependent_launch.h"
#include "core/cuda/device_info.h"
#include "core/env_switch.h"
#include "core/error.h"
#include "core/fp8/cuda/fp8_device.cuh"
#include "core/fp8/cuda/group_tables.cuh"
#include "core/fp8/cuda/launch_util.h"
#include "core/fp8/cuda/quantize_ops_cuda.h"
#include "core/fp8/cuda/quantize_tile.cuh"
#include "core/fp8/quantize_ops_backend.h"
#include "core/log.h"

namespace grouped_linear::fp8::cuda_impl {
namespace {

// ---------------------------------------------------------------------------
// amax partials for current scaling. One pass covers up to two operands (a
// forward's X and W: one launch for both, as their casts share one); each
// is `groups` matrices of which `chunks` CTAs take one each, CTA `chunk`
// merging |x| over rows chunk * 8 + warp, stepping by chunks * 8.

struct AmaxPass {
  const void* input = nullptr;
  int64_t stride = 0, group_stride = 0, rows = 0, cols = 0;
  int64_t groups = 0, chunks = 0;
  bool vec = false;
  float* partial = nullptr;  // [groups, chunks]
  DType dtype = DType::kBFloat16;

  __host__ __device__ int64_t ctas() const { return groups * chunks; }
};

template <int K>
__device__ void amax_chunk(const AmaxPass& a, int64_t g, int64_t chunk) {
  using S = typename Storage<K>::type;
  __shared__ float scratch[kWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const S* base = static_cast<const S*>(a.input) + g * a.group_stride;
  const int64_t vec_cols = a.vec ? a.cols / 4 * 4 : 0;
  uint32_t m = 0;  // abs_bits maximum (fp8_device.cuh)
  for (int64_t r = chunk * kWarps + warp; r < a.rows; r += a.chunks * kWarps) {
    const S* row = base + r * a.stride;
    // Unrolled so that each lane has 4 loads in flight, not 1: this pass is
    // bound by memory latency (the maximum is order-free, the bits unchanged).
#pragma unroll 4
    for (int64_t c = lane * 4; c < vec_cols; c += 128) {
      S raw[4];
      load4<K>(row + c, raw);
#pragma unroll
      for (int e = 0; e < 4; ++e) m = max(m, abs_bits(widen<K>(raw[e])));
    }
    for (int64_t c = vec_cols + lane; c < a.cols; c += 32) m = max(m, abs_bits(widen<K>(row[c])));
  }
  const float amax = amax_from_abs_bits(warp_max_bits(m));
  if (lane == 0) scratch[warp] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w) total = merge_amax(total, scratch[w]);
    a.partial[g * a.chunks + chunk] = total;
  }
  // A CTA of a cooperative grid may take several chunks in turn: the next
  // one's warps must not overwrite `scratch` before thread 0 has read it.
  __syncthreads();
}

// CTAs [0, first.ctas()) take `first`'s chunks, the rest `second`'s (which
// may be empty); both of input kind K.
template <int K>
__global__ void __launch_bounds__(kThreads)
    amax_kernel(const __grid_constant__ AmaxPass first, const __grid_constant__ AmaxPass second) {
  const int64_t cta = blockIdx.x;
  const bool in_first = cta < first.ctas();
  const AmaxPass& a = in_first ? first : second;
  const int64_t i = in_first ? cta : cta - first.ctas();
  amax_chunk<K>(a, i / a.chunks, i % a.chunks);
}

// Current scaling in the cast's own launch: the grid's CTAs take the amax
// passes' chunks first, then meet at a grid-wide barrier (the kernel is
// launched cooperatively, so every CTA is resident), after which each CTA
// reads the partials as it would after a separate amax launch.
template <int K>
__device__ void amax_then_grid_sync(const AmaxPass& first, const AmaxPass& second) {
  const int64_t items = first.ctas() + second.ctas();
  for (int64_t i = blockIdx.x; i < items; i += gridDim.x) {
    const bool in_first = i < first.ctas();
    const AmaxPass& a = in_first ? first : second;
    const int64_t j = in_first ? i : i - first.ctas();
    amax_chunk<K>(a, j / a.chunks, j % a.chunks);
  }
  cooperative_groups::this_grid().sync();
}

// The amax of matrix g from its partials (every thread gets it).
__device__ float reduce_partials(const float* partial, int count, float* scratch) {
  float a = 0.f;
  for (int i = threadIdx.x; i < count; i += kThreads) a = merge_amax(a, partial[i]);
  a = warp_merge_amax(a);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = a;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < kWarps; ++w) total = merge_amax(total, scratch[w]);
  __syncthreads();
  return total;
}

__device__ void store_float(void* base, DType dtype, int64_t index, float value) {
  if (dtype == DType::kFloat32)
    static_cast<float*>(base)[index] = value;
  else if (dtype == DType::kFloat16)
    static_cast<uint16_t*>(base)[index] = float_to_fp16_bits(value);
  else
    static_cast<uint16_t*>(base)[index] = float_to_bf16_bits(value);
}

// ---------------------------------------------------------------------------
// Activations.

struct ActivationParams {
  const void* input;
  int64_t in_stride, rows, cols, col_tiles;
  int groups;
  uint8_t* row_codes;  // null: no row-wise codes (row_scale may still be wanted)
  int64_t row_stride;
  float* row_scale;
  uint8_t* col_codes;
  int64_t col_stride;
  float* col_scale;
  void* dbias;  // null: no bias gradient
  DType dbias_dtype;
  int64_t dbias_group_stride;
  float* dbias_partial;       // [row tiles, C]
  unsigned int* dbias_count;  // [G, column tiles], zeroed
  RecipeKind kind;
  Format format;
  int margin;
  bool power_2;
  float* state_scale;
  float* state_amax;
  const float* amax_partial;  // kCurrent
  int amax_partials;
  bool vec_in, vec_row_out;
  bool full_tiles;  // 16-bit input, pointers and strides as quantize_full_tile needs them
};

// The activation cast on CTAs [0, ctas) of a grid: `cta` is this CTA's index
// among them (quantize_activation_kernel: all of the grid;
// quantize_forward_kernel: the first CTAs).
template <int K, bool kBlockScaled, typename Sizes>
__device__ __forceinline__ void quantize_activation_ctas(const ActivationParams& p,
                                                         const Sizes& sizes, int cta, int ctas) {
  using S = typename Storage<K>::type;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int64_t scan_scratch[kWarps];
  __shared__ float scratch[kWarps];
  __shared__ float column_sums[kWarps][kTile];
  __shared__ bool last_tile;
  const int groups = p.groups;
  const GroupTables t = group_tables_at(smem, groups);
  S* tile = reinterpret_cast<S*>(smem + group_tables_bytes(groups));
  build_group_tables<kThreads>(sizes, groups, p.rows, t, scan_scratch);

  // Per-tensor scale: read (delayed) or from this cast's amax (current).
  float scale = 1.f;
  if constexpr (!kBlockScaled) {
    float amax = 0.f;
    if (p.kind == RecipeKind::kDelayed) {
      scale = *p.state_scale;
    } else {
      amax = reduce_partials(p.amax_partial, p.amax_partials, scratch);
      scale = device_scale_from_amax(amax, format_info(p.format).max, p.margin, 1.f, p.power_2);
    }
    if (cta == 0 && threadIdx.x == 0) {
      const float inv = host_recip(scale);
      if (p.row_scale != nullptr) p.row_scale[0] = inv;
      if (p.col_scale != nullptr) p.col_scale[0] = inv;
      if (p.kind == RecipeKind::kCurrent) {
        if (p.state_scale != nullptr) *p.state_scale = scale;
        if (p.state_amax != nullptr) *p.state_amax = merge_amax(*p.state_amax, amax);
      }
    }
  }
  const bool track = !kBlockScaled && p.kind == RecipeKind::kDelayed && p.state_amax != nullptr;
  uint32_t amax_bits = 0;

  // Tiles of each group's rows, then (device sizes that hold fewer than T
  // rows) tiles of the rows no group holds: those have a row-wise copy only.
  const int64_t group_tiles = t.block[groups];
  const int64_t held = t.row[groups];
  const int64_t units = (group_tiles + (p.rows - held + kTile - 1) / kTile) * p.col_tiles;
  for (int64_t u = cta; u < units; u += ctas) {
    const int64_t rt = u / p.col_tiles;  // row tile, over all groups
    const int ct = static_cast<int>(u - rt * p.col_tiles);
    const bool in_group = rt < group_tiles;
    const int g = in_group ? find_group(t.block, groups, rt) : 0;
    const int j = in_group ? static_cast<int>(rt - t.block[g]) : 0;  // row tile within the group
    const int m = in_group ? t.row[g + 1] - t.row[g] : 0;
    const int64_t r0 =
        in_group ? t.row[g] + static_cast<int64_t>(j) * kTile : held + (rt - group_tiles) * kTile;
    const int64_t c0 = static_cast<int64_t>(ct) * kTile;
    TileIO io;
    io.in = static_cast<const S*>(p.input) + r0 * p.in_stride + c0;
    io.in_stride = p.in_stride;
    io.nr = in_group ? min(kTile, m - j * kTile)
                     : static_cast<int>(p.rows - r0 < kTile ? p.rows - r0 : kTile);
    io.nc = static_cast<int>(p.cols - c0 < kTile ? p.cols - c0 : kTile);
    io.row_out = p.row_codes != nullptr ? p.row_codes + r0 * p.row_stride + c0 : nullptr;
    io.row_stride = p.row_stride;
    // Block-major scales (fp8_tensor.h): row-wise [column tiles, T], column-wise
    // [capacity, C], so a tile's 128 scales are adjacent either way.
    io.row_scale =
        kBlockScaled && p.row_codes != nullptr ? p.row_scale + ct * p.rows + r0 : nullptr;
    io.row_scale_stride = 1;
    io.col_out =
        in_group && p.col_codes != nullptr
            ? p.col_codes + c0 * p.col_stride + t.column[g] + static_cast<int64_t>(j) * kTile
            : nullptr;
    io.col_stride = p.col_stride;
    io.col_scale = in_group && kBlockScaled && p.col_codes != nullptr
                       ? p.col_scale + (t.block[g] + j) * p.cols + c0
                       : nullptr;
    io.col_scale_stride = 1;
    const bool last_of_group = j * kTile + io.nr == m;
    io.nr_pad = in_group && last_of_group ? aligned_columns(io.nr) : io.nr;
    io.vec_in = p.vec_in;
    io.vec_out = p.vec_row_out;
    const bool sums_on = in_group && p.dbias != nullptr;
    // Tiles of 128 columns of 16-bit values take the wide paths
    // (quantize_tile.cuh), which sum no columns: per-tensor scales give both
    // copies one scale (the weights' path), 1 x 128 blocks a scale per row
    // and per column.
    if constexpr (K != kInF32) {
      if (!sums_on && wide_rows_tile(io, p.full_tiles)) {  // the same in every thread
        if constexpr (kBlockScaled)
          quantize_wide_tile_blockwise<K>(io, p.format, p.power_2,
                                          reinterpret_cast<unsigned char*>(tile));
        else if (io.nr == kTile && io.nr_pad == kTile)
          quantize_full_tile<K, kUniform, true>(io, scale, p.format, p.power_2,
                                                reinterpret_cast<uint16_t*>(tile), scratch, track,
                                                amax_bits);
        else
          quantize_full_tile<K, kUniform, false>(io, scale, p.format, p.power_2,
                                                 reinterpret_cast<uint16_t*>(tile), scratch, track,
                                                 amax_bits);
        continue;
      }
    }
    float sums[4] = {0.f, 0.f, 0.f, 0.f};
    quantize_tile<K, kBlockScaled ? kPerRowCol : kUniform>(
        io, scale, p.format, p.power_2, tile, scratch, track, amax_bits, sums_on, sums);
    if (sums_on) {
      // This tile's column sums -> partial row rt; the group's last tile for
      // this column range adds the group's partials in row order.
      const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
      for (int e = 0; e < 4; ++e) column_sums[warp][lane * 4 + e] = sums[e];
      __syncthreads();
      if (threadIdx.x < io.nc) {
        float s = 0.f;
        for (int w = 0; w < kWarps; ++w) s += column_sums[w][threadIdx.x];
        p.dbias_partial[rt * p.cols + c0 + threadIdx.x] = s;
      }
      __threadfence();
      __syncthreads();
      const unsigned int tiles = static_cast<unsigned int>((m + kTile - 1) / kTile);
      if (threadIdx.x == 0)
        last_tile = atomicAdd(&p.dbias_count[g * p.col_tiles + ct], 1u) == tiles - 1;
      __syncthreads();
      if (last_tile && threadIdx.x < io.nc) {
        __threadfence();
        float s = 0.f;
        for (unsigned int q = 0; q < tiles; ++q)
          s += __ldcg(&p.dbias_partial[(t.block[g] + q) * p.cols + c0 + threadIdx.x]);
        store_float(p.dbias, p.dbias_dtype, g * p.dbias_group_stride + c0 + threadIdx.x, s);
      }
    }
  }

  if (track) merge_cta_amax(amax_bits, scratch, p.state_amax);
  // Empty groups' bias gradient is zero.
  if (p.dbias != nullptr) {
    const int64_t first = static_cast<int64_t>(cta) * kThreads + threadIdx.x;
    const int64_t step = static_cast<int64_t>(ctas) * kThreads;
    for (int64_t i = first; i < groups * p.cols; i += step) {
      const int g = static_cast<int>(i / p.cols);
      if (t.row[g + 1] == t.row[g])
        store_float(p.dbias, p.dbias_dtype, g * p.dbias_group_stride + (i - g * p.cols), 0.f);
    }
  }
}

// At least 3 CTAs per SM: without the bound ptxas takes 96 registers for the
// per-tensor variants (2 CTAs, 16 warps an SM, too few loads in flight to
// cover HBM latency); with it 71-74 and no spills (CUDA 13.0, sm_90a). Four
// for the blockwise variants (64 registers) spilled and took 1.26-1.37x as
// long on an H100.
template <int K, bool kBlockScaled, typename Sizes>
__global__ void __launch_bounds__(kThreads, 3)
    quantize_activation_kernel(const __grid_constant__ ActivationParams p,
                               const __grid_constant__ Sizes sizes) {
  cuda::enter_dependent_grid();
  quantize_activation_ctas<K, kBlockScaled>(p, sizes, blockIdx.x, gridDim.x);
}

// quantize_activation_kernel under current scaling with its amax pass first
// (cooperative launch only).
template <int K, typename Sizes>
__global__ void __launch_bounds__(kThreads, 3)
    current_activation_kernel(const __grid_constant__ ActivationParams p,
                              const __grid_constant__ Sizes sizes,
                              const __grid_constant__ AmaxPass amax) {
  amax_then_grid_sync<K>(amax, AmaxPass{});
  quantize_activation_ctas<K, false>(p, sizes, blockIdx.x, gridDim.x);
}

template <typename Fn>
void dispatch_input(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: fn(std::integral_constant<int, kInF32>{}); return;
    case DType::kFloat16: fn(std::integral_constant<int, kInF16>{}); return;
    case DType::kBFloat16: fn(std::integral_constant<int, kInBF16>{}); return;
    default: GL_CHECK(false, "FP8 quantization: unsupported input dtype ", dtype_name(dtype));
  }
}

bool aligned(const void* ptr, size_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

int64_t blocks_of(int64_t n) { return (n + kTile - 1) / kTile; }

// Plans the amax pass over `groups` matrices: its chunks and its partials
// (allocated here, written when launched).
AmaxPass plan_amax(DType dtype, const void* input, int64_t stride, int64_t group_stride,
                   int64_t groups, int64_t rows, int64_t cols, int sm_ctas, CallWorkspace& ws) {
  GL_CHECK_VALUE(groups <= 65535, "FP8 current scaling: ", groups, " groups, at most 65535");
  AmaxPass a;
  a.input = input;
  a.stride = stride;
  a.group_stride = group_stride;
  a.rows = rows;
  a.cols = cols;
  a.groups = groups;
  a.dtype = dtype;
  const size_t elem = element_size(dtype);
  a.vec = aligned(input, 4 * elem) && stride % 4 == 0 && group_stride % 4 == 0;
  int64_t chunks = (rows + kWarps - 1) / kWarps;
  const int64_t budget = groups > 0 ? sm_ctas / groups : 1;
  chunks = chunks < 1 ? 1 : chunks;
  if (chunks > budget) chunks = budget < 1 ? 1 : budget;
  if (chunks > 1024) chunks = 1024;
  a.chunks = chunks;
  a.partial = static_cast<float*>(ws.allocate(sizeof(float) * chunks * (groups > 0 ? groups : 1)));
  return a;
}

// Launches one amax pass, or two of one input kind in one grid (an empty
// pass adds no CTA).
void launch_amax(const AmaxPass& first, const AmaxPass& second, cudaStream_t stream) {
  GL_CHECK(first.ctas() == 0 || second.ctas() == 0 || first.dtype == second.dtype,
           "FP8 amax: passes of two input kinds in one launch");
  const int64_t ctas = first.ctas() + second.ctas();
  if (ctas == 0) return;
  dispatch_input(first.ctas() > 0 ? first.dtype : second.dtype, [&](auto k) {
    constexpr int K = decltype(k)::value;
    amax_kernel<K><<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(first, second);
    GL_CUDA_CHECK_LAUNCH();
  });
}

// Whether the casts may take current scaling's amax pass into a cooperative
// launch: where the device has them, unless GROUPED_LINEAR_COOPERATIVE_CASTS
// is 0/off/false/no (read once). A cooperative grid needs all its CTAs
// resident at once, which a kernel on another stream that holds SMs while it
// waits for work queued after the cast (a spinning communication kernel)
// would never allow; the separate amax launch has no such need.
bool cooperative_casts(const ExecContext& ctx) {
  static const bool allowed = env_switch("GROUPED_LINEAR_COOPERATIVE_CASTS", true);
  return allowed && cuda::device_info(ctx.device.index).cooperative_launch;
}

// Whether current scaling's amax pass runs inside the cast's launch.
bool amax_in_cast(const AmaxPass& amax, const ExecContext& ctx) {
  return amax.ctas() > 0 && cooperative_casts(ctx);
}

// A cooperative launch of `grid` CTAs (at most device_wide_ctas of the
// kernel). Returns false, launching nothing, where the device cannot hold
// that grid at once after all (SMs taken by MPS or green contexts): the
// caller then launches the amax pass on its own.
template <typename... Params, typename... Args>
bool launch_cooperative(void (*kernel)(Params...), int64_t grid, size_t smem, cudaStream_t stream,
                        Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute cooperative{};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (status == cudaErrorCooperativeLaunchTooLarge) {
    (void)cudaGetLastError();  // clears the error, which is not sticky
    return false;
  }
  GL_CUDA_CHECK(status);
  return true;
}

template <int K, bool kBlockScaled, typename Sizes>
void launch_activation_kernel(const ActivationParams& p, const Sizes& sizes, size_t smem,
                              int64_t units_bound, const ExecContext& ctx) {
  auto kernel = quantize_activation_kernel<K, kBlockScaled, Sizes>;
  const int ctas =
      device_wide_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem, ctx.device.index);
  const int64_t grid = units_bound < 1 ? 1 : (units_bound < ctas ? units_bound : ctas);
  cuda::launch_dependent(kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads), smem,
                         static_cast<cudaStream_t>(ctx.stream), ctx.device.index, p, sizes);
}

// One cast, ready to launch: its parameters, the group sizes it reads (kernel
// arguments or a device array) and its grid. Preparing may queue what must
// run before the cast: current scaling's amax pass, the bias gradient's
// counter reset, host sizes staged on the device.
struct ActivationLaunch {
  ActivationParams p{};
  DType dtype = DType::kBFloat16;
  bool block = false;
  size_t smem = 0;
  int64_t units_bound = 0;
  bool device_sizes = false;
  HostSizes host{};
  DeviceSizes device{};
  AmaxPass amax{};  // current scaling: launched before the cast

  template <typename Fn>
  void with_sizes(Fn&& fn) const {
    if (device_sizes)
      fn(device);
    else
      fn(host);
  }
};

void prepare_activation(const ActivationQuantize& r, const ExecContext& ctx, CallWorkspace& ws,
                        ActivationLaunch& out) {
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  const int64_t t = r.input.rows, c = r.input.cols;
  const bool rowwise = r.out.rowwise.data != nullptr || r.out.rowwise_scale.scale_inv != nullptr;
  const bool columnwise =
      r.out.columnwise.data != nullptr || r.out.columnwise_scale.scale_inv != nullptr;
  // Without a column-wise copy or dbias the groups do not matter: one group of T rows.
  const bool grouped = columnwise || r.dbias.present;
  const int64_t groups = grouped ? r.splits.num_groups : 1;
  GL_CHECK_VALUE(t + kTile * (groups + 1) < INT32_MAX && c < INT32_MAX,
                 "FP8 quantization on CUDA: ", t, " rows in ", groups,
                 " groups exceed the kernels' 32-bit row indices");
  const bool block = r.kind == RecipeKind::kBlock;
  const int sm_ctas = 4 * cuda::device_info(ctx.device.index).sm_count;

  ActivationParams& p = out.p;
  p.input = r.input.data;
  p.in_stride = r.input.row_stride;
  p.rows = t;
  p.cols = c;
  p.col_tiles = blocks_of(c);
  p.groups = static_cast<int>(groups);
  if (rowwise) {
    p.row_codes = static_cast<uint8_t*>(r.out.rowwise.data);
    p.row_stride = r.out.rowwise.row_stride;
    p.row_scale = r.out.rowwise_scale.scale_inv;
  }
  if (columnwise) {
    p.col_codes = static_cast<uint8_t*>(r.out.columnwise.data);
    p.col_stride = r.out.columnwise.row_stride;
    p.col_scale = r.out.columnwise_scale.scale_inv;
  }
  p.kind = r.kind;
  p.format = r.format;
  p.margin = r.margin;
  p.power_2 = r.power_2_scales;
  p.state_scale = r.state.scale;
  p.state_amax = r.state.amax;
  const size_t elem = element_size(r.input.dtype);
  p.vec_in = aligned(r.input.data, 4 * elem) && r.input.row_stride % 4 == 0;
  p.vec_row_out = rowwise && aligned(r.out.rowwise.data, 4) && r.out.rowwise.row_stride % 4 == 0;
  // quantize_full_tile: 16-byte loads, 8-byte row-wise and 4-byte column-wise
  // stores at every tile's origin (row tiles start at any row; column-wise
  // groups start at multiples of 16 columns).
  p.full_tiles = elem == 2 && aligned(r.input.data, 16) && r.input.row_stride % 8 == 0 &&
                 (r.out.rowwise.data == nullptr ||
                  (aligned(r.out.rowwise.data, 8) && r.out.rowwise.row_stride % 8 == 0)) &&
                 (r.out.columnwise.data == nullptr ||
                  (aligned(r.out.columnwise.data, 4) && r.out.columnwise.row_stride % 4 == 0));
  if (r.kind == RecipeKind::kCurrent) {
    out.amax = plan_amax(r.input.dtype, r.input.data, r.input.row_stride, 0, 1, t, c, sm_ctas, ws);
    p.amax_partial = out.amax.partial;
    p.amax_partials = t * c > 0 ? static_cast<int>(out.amax.chunks) : 0;
  }
  // Row tiles: each group's, plus those of rows no group holds (at most one
  // more than T / 128 + G in all).
  const int64_t row_tiles_bound = grouped ? column_block_capacity(t, groups) + 1 : blocks_of(t);
  if (r.dbias.present) {
    p.dbias = r.dbias.data;
    p.dbias_dtype = r.dbias.dtype;
    p.dbias_group_stride = r.dbias.group_stride;
    p.dbias_partial = static_cast<float*>(ws.allocate(sizeof(float) * row_tiles_bound * c));
    const size_t count_bytes = sizeof(unsigned int) * groups * p.col_tiles;
    p.dbias_count = static_cast<unsigned int*>(ws.allocate(count_bytes));
    GL_CUDA_CHECK(cudaMemsetAsync(p.dbias_count, 0, count_bytes, stream));
  }
  const size_t smem = group_tables_bytes(groups) +
                      (columnwise ? (r.input.dtype == DType::kFloat32 ? tile_bytes<kInF32>()
                                                                      : tile_bytes<kInBF16>())
                                  : 0);
  out.dtype = r.input.dtype;
  out.block = block;
  out.smem = smem;
  out.units_bound = row_tiles_bound * p.col_tiles;
  if (!grouped || r.splits.host != nullptr) {
    if (groups <= kHostSizeCapacity) {
      for (int64_t g = 0; g < groups; ++g)
        out.host.size[g] = static_cast<int32_t>(grouped ? r.splits.host[g] : t);
      return;
    }
    // More host sizes than fit in kernel arguments: staged on the device
    // (an asynchronous copy; not capturable in a CUDA graph).
    void* staged = ws.allocate(sizeof(int64_t) * groups);
    GL_CUDA_CHECK(cudaMemcpyAsync(staged, r.splits.host, sizeof(int64_t) * groups,
                                  cudaMemcpyHostToDevice, stream));
    out.device_sizes = true;
    out.device = DeviceSizes{staged, true};
    return;
  }
  out.device_sizes = true;
  out.device = DeviceSizes{r.splits.device, r.splits.device_dtype == DType::kInt64};
}

// The cast, after its amax pass (current scaling): in its own launch where
// the device allows cooperative launches, else in one before.
void launch_activation(const ActivationLaunch& a, const ExecContext& ctx) {
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  if (amax_in_cast(a.amax, ctx)) {
    bool launched = false;
    a.with_sizes([&](const auto& sizes) {
      using Sizes = std::decay_t<decltype(sizes)>;
      dispatch_input(a.dtype, [&](auto k) {
        constexpr int K = decltype(k)::value;
        auto kernel = current_activation_kernel<K, Sizes>;
        const int ctas = device_wide_ctas(reinterpret_cast<const void*>(kernel), kThreads, a.smem,
                                          ctx.device.index);
        const int64_t grid = a.units_bound < 1 ? 1 : (a.units_bound < ctas ? a.units_bound : ctas);
        launched = launch_cooperative(kernel, grid, a.smem, stream, a.p, sizes, a.amax);
      });
    });
    if (launched) return;
  }
  launch_amax(a.amax, AmaxPass{}, stream);
  a.with_sizes([&](const auto& sizes) {
    using Sizes = std::decay_t<decltype(sizes)>;
    dispatch_input(a.dtype, [&](auto k) {
      constexpr int K = decltype(k)::value;
      if (a.block)
        launch_activation_kernel<K, true, Sizes>(a.p, sizes, a.smem, a.units_bound, ctx);
      else
        launch_activation_kernel<K, false, Sizes>(a.p, sizes, a.smem, a.units_bound, ctx);
    });
  });
}

void quantize_activation_cuda(const ActivationQuantize& r, const ExecContext& ctx) {
  CallWorkspace ws(ctx);
  ActivationLaunch a;
  prepare_activation(r, ctx, ws, a);
  launch_activation(a, ctx);
}

// ---------------------------------------------------------------------------
// Weights.

struct WeightParams {
  const void* input;
  int64_t in_stride, in_group_stride, groups, rows, cols, row_tiles, col_tiles;
  uint8_t* row_codes;
  int64_t row_stride, row_group_stride;
  float* row_scale;
  uint8_t* col_codes;
  int64_t col_stride, col_group_stride;
  float* col_scale;
  RecipeKind kind;
  Format format;
  int margin;
  bool power_2;
  float* state_scale;
  float* state_amax;
  const float* amax_partial;  // kCurrent: amax_chunks per group
  int amax_chunks;
  bool vec_in, vec_row_out;
  bool full_tiles;  // 16-bit input, pointers and strides as quantize_full_tile needs them
};

__device__ float group_amax(const WeightParams& p, int64_t g) {
  float a = 0.f;
  for (int q = 0; q < p.amax_chunks; ++q) a = merge_amax(a, p.amax_partial[g * p.amax_chunks + q]);
  return a;
}

// The weight cast on CTAs [0, ctas) of a grid, as quantize_activation_ctas.
template <int K, bool kBlockScaled>
__device__ __forceinline__ void quantize_weight_ctas(const WeightParams& p, int cta, int ctas) {
  using S = typename Storage<K>::type;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float scratch[kWarps];
  S* tile = reinterpret_cast<S*>(smem);
  const float fp8_max = format_info(p.format).max;

  // Per-tensor bookkeeping, one thread per group: scale_inv of both copies
  // and the state.
  if constexpr (!kBlockScaled) {
    const int64_t first = static_cast<int64_t>(cta) * kThreads + threadIdx.x;
    for (int64_t g = first; g < p.groups; g += static_cast<int64_t>(ctas) * kThreads) {
      float scale;
      if (p.kind == RecipeKind::kDelayed) {
        scale = p.state_scale[g];
        // Merging 0 changes nothing but a NaN's payload, as the CPU's merge does.
        if (p.state_amax != nullptr) atomic_merge_amax(&p.state_amax[g], 0.f);
      } else {
        const float amax = group_amax(p, g);
        scale = device_scale_from_amax(amax, fp8_max, p.margin, 1.f, p.power_2);
        if (p.state_scale != nullptr) p.state_scale[g] = scale;
        if (p.state_amax != nullptr) p.state_amax[g] = merge_amax(p.state_amax[g], amax);
      }
      if (p.row_scale != nullptr) p.row_scale[g] = host_recip(scale);
      if (p.col_scale != nullptr) p.col_scale[g] = host_recip(scale);
    }
  }
  const bool track = !kBlockScaled && p.kind == RecipeKind::kDelayed && p.state_amax != nullptr;
  const int64_t per_group = p.row_tiles * p.col_tiles;
  const int64_t units = p.groups * per_group;
  // A CTA's tiles come in group order: one scale per group met, and the
  // group's |x| is maxed in registers across its tiles, then merged into
  // the state once per CTA when the group changes. (A merge per tile behind
  // two barriers, each a global read and maybe a CAS on an address the
  // group's CTAs share, stalled every tile; one per warp, 8 CAS loops
  // contending for each address, made small problems slow.)
  int64_t scale_group = -1;
  float scale = 1.f;
  uint32_t amax_bits = 0;
  auto flush_amax = [&] {  // the same scale_group in every thread
    merge_cta_amax(amax_bits, scratch, &p.state_amax[scale_group]);
  };
  for (int64_t u = cta; u < units; u += ctas) {
    const int64_t g = u / per_group;
    const int64_t rem = u - g * per_group;
    const int64_t tn = rem / p.col_tiles, tk = rem - tn * p.col_tiles;
    const int64_t r0 = tn * kTile, c0 = tk * kTile;
    if (!kBlockScaled && g != scale_group) {  // the same g in every thread
      if (track && scale_group >= 0) flush_amax();
      scale = p.kind == RecipeKind::kDelayed
                  ? p.state_scale[g]
                  : device_scale_from_amax(
                        reduce_partials(p.amax_partial + g * p.amax_chunks, p.amax_chunks, scratch),
                        fp8_max, p.margin, 1.f, p.power_2);
      scale_group = g;
    }
    TileIO io;
    io.in = static_cast<const S*>(p.input) + g * p.in_group_stride + r0 * p.in_stride + c0;
    io.in_stride = p.in_stride;
    io.nr = static_cast<int>(p.rows - r0 < kTile ? p.rows - r0 : kTile);
    io.nc = static_cast<int>(p.cols - c0 < kTile ? p.cols - c0 : kTile);
    io.row_out = p.row_codes != nullptr
                     ? p.row_codes + g * p.row_group_stride + r0 * p.row_stride + c0
                     : nullptr;
    io.row_stride = p.row_stride;
    io.row_scale = kBlockScaled && p.row_scale != nullptr
                       ? p.row_scale + g * per_group + tn * p.col_tiles + tk
                       : nullptr;
    io.row_scale_stride = 0;
    io.col_out = p.col_codes != nullptr
                     ? p.col_codes + g * p.col_group_stride + c0 * p.col_stride + r0
                     : nullptr;
    io.col_stride = p.col_stride;
    io.col_scale = kBlockScaled && p.col_scale != nullptr
                       ? p.col_scale + g * per_group + tk * p.row_tiles + tn
                       : nullptr;
    io.col_scale_stride = 0;
    io.nr_pad = io.nr;
    io.vec_in = p.vec_in;
    io.vec_out = p.vec_row_out;
    constexpr int kScaling = kBlockScaled ? kPerTile : kUniform;
    if constexpr (K != kInF32) {
      if (full_tile(io, p.full_tiles)) {  // the same in every thread
        quantize_full_tile<K, kScaling, true>(io, scale, p.format, p.power_2, tile, scratch, track,
                                              amax_bits);
        continue;
      }
    }
    float sums[4];
    quantize_tile<K, kScaling>(io, scale, p.format, p.power_2, tile, scratch, track, amax_bits,
                               false, sums);
  }
  if (track && scale_group >= 0) flush_amax();
}

template <int K, bool kBlockScaled>
__global__ void __launch_bounds__(kThreads)
    quantize_weight_kernel(const __grid_constant__ WeightParams p) {
  cuda::enter_dependent_grid();
  quantize_weight_ctas<K, kBlockScaled>(p, blockIdx.x, gridDim.x);
}

template <int K>
__global__ void __launch_bounds__(kThreads)
    current_weight_kernel(const __grid_constant__ WeightParams p,
                          const __grid_constant__ AmaxPass amax) {
  amax_then_grid_sync<K>(amax, AmaxPass{});
  quantize_weight_ctas<K, false>(p, blockIdx.x, gridDim.x);
}

// A forward's two casts in one grid: CTAs [0, activation_ctas) cast X, the
// others W, each part striding over its own tiles.
template <int K, bool kBlockScaled, typename Sizes>
__device__ void forward_casts_ctas(const ActivationParams& a, const Sizes& sizes,
                                   const WeightParams& w, int activation_ctas) {
  const int cta = static_cast<int>(blockIdx.x);
  if (cta < activation_ctas)
    quantize_activation_ctas<K, kBlockScaled>(a, sizes, cta, activation_ctas);
  else
    quantize_weight_ctas<K, kBlockScaled>(w, cta - activation_ctas,
                                          static_cast<int>(gridDim.x) - activation_ctas);
}

// The two casts in one launch, for small calls (kForwardTogetherWaves): one
// launch less, on the host and on the device, which is what such calls cost.
template <int K, bool kBlockScaled, typename Sizes>
__global__ void __launch_bounds__(kThreads)
    quantize_forward_kernel(const __grid_constant__ ActivationParams a,
                            const __grid_constant__ Sizes sizes,
                            const __grid_constant__ WeightParams w, int activation_ctas) {
  cuda::enter_dependent_grid();
  forward_casts_ctas<K, kBlockScaled>(a, sizes, w, activation_ctas);
}

// quantize_forward_kernel under current scaling, both amax passes first.
template <int K, typename Sizes>
__global__ void __launch_bounds__(kThreads)
    current_forward_kernel(const __grid_constant__ ActivationParams a,
                           const __grid_constant__ Sizes sizes,
                           const __grid_constant__ WeightParams w, int activation_ctas,
                           const __grid_constant__ AmaxPass a_amax,
                           const __grid_constant__ AmaxPass w_amax) {
  amax_then_grid_sync<K>(a_amax, w_amax);
  forward_casts_ctas<K, false>(a, sizes, w, activation_ctas);
}

// The weight cast, ready to launch (as ActivationLaunch); `empty`: no group,
// nothing to launch.
struct WeightLaunch {
  WeightParams p{};
  DType dtype = DType::kBFloat16;
  bool block = false;
  bool empty = true;
  size_t smem = 0;
  int64_t wanted = 0;  // CTAs with work: tiles, or the per-group bookkeeping
  AmaxPass amax{};     // current scaling: launched before the cast
};

void prepare_weight(const WeightQuantize& r, const ExecContext& ctx, CallWorkspace& ws,
                    WeightLaunch& out) {
  const GroupedMatrixView& in = r.input;
  const bool rowwise = r.out.rowwise.data != nullptr || r.out.rowwise_scale.scale_inv != nullptr;
  const bool columnwise =
      r.out.columnwise.data != nullptr || r.out.columnwise_scale.scale_inv != nullptr;
  const bool block = r.kind == RecipeKind::kBlock;
  out.dtype = in.dtype;
  out.block = block;
  out.empty = in.groups == 0;
  if (out.empty) return;
  const int sm_ctas = 4 * cuda::device_info(ctx.device.index).sm_count;

  WeightParams& p = out.p;
  p.input = in.data;
  p.in_stride = in.row_stride;
  p.in_group_stride = in.group_stride;
  p.groups = in.groups;
  p.rows = in.rows;
  p.cols = in.cols;
  p.row_tiles = blocks_of(in.rows);
  p.col_tiles = blocks_of(in.cols);
  if (rowwise) {
    p.row_codes = static_cast<uint8_t*>(r.out.rowwise.data);
    p.row_stride = r.out.rowwise.row_stride;
    p.row_group_stride = r.out.rowwise.group_stride;
    p.row_scale = r.out.rowwise_scale.scale_inv;
  }
  if (columnwise) {
    p.col_codes = static_cast<uint8_t*>(r.out.columnwise.data);
    p.col_stride = r.out.columnwise.row_stride;
    p.col_group_stride = r.out.columnwise.group_stride;
    p.col_scale = r.out.columnwise_scale.scale_inv;
  }
  p.kind = r.kind;
  p.format = r.format;
  p.margin = r.margin;
  p.power_2 = r.power_2_scales;
  p.state_scale = r.state.scale;
  p.state_amax = r.state.amax;
  const size_t elem = element_size(in.dtype);
  p.vec_in = aligned(in.data, 4 * elem) && in.row_stride % 4 == 0 && in.group_stride % 4 == 0;
  p.vec_row_out = rowwise && aligned(r.out.rowwise.data, 4) && r.out.rowwise.row_stride % 4 == 0 &&
                  r.out.rowwise.group_stride % 4 == 0;
  // quantize_full_tile: 16-byte loads (8 elements), 8-byte row-wise and
  // 4-byte column-wise stores, at every tile's origin.
  p.full_tiles = elem == 2 && aligned(in.data, 16) && in.row_stride % 8 == 0 &&
                 in.group_stride % 8 == 0 &&
                 (r.out.rowwise.data == nullptr ||
                  (aligned(r.out.rowwise.data, 8) && r.out.rowwise.row_stride % 8 == 0 &&
                   r.out.rowwise.group_stride % 8 == 0)) &&
                 (r.out.columnwise.data == nullptr ||
                  (aligned(r.out.columnwise.data, 4) && r.out.columnwise.row_stride % 4 == 0 &&
                   r.out.columnwise.group_stride % 4 == 0));
  if (r.kind == RecipeKind::kCurrent) {
    out.amax = plan_amax(in.dtype, in.data, in.row_stride, in.group_stride, in.groups, in.rows,
                         in.cols, sm_ctas, ws);
    p.amax_partial = out.amax.partial;
    p.amax_chunks = static_cast<int>(out.amax.chunks);
  }
  // The tile is staged for the column-wise copy, and for a 128 x 128 block's
  // scale (known only once every row is read). When every tile takes
  // quantize_full_tile, the per-tensor scaling stages only the codes: a
  // smaller buffer, more CTAs an SM.
  const bool all_full = p.full_tiles && in.rows % kTile == 0 && in.cols % kTile == 0;
  const size_t smem = !columnwise && !block         ? 0
                      : all_full && !block          ? kCodeTileBytes
                      : in.dtype == DType::kFloat32 ? tile_bytes<kInF32>()
                                                    : tile_bytes<kInBF16>();
  const int64_t units = in.groups * p.row_tiles * p.col_tiles;
  const int64_t bookkeeping = (in.groups + kThreads - 1) / kThreads;
  out.smem = smem;
  out.wanted = units > bookkeeping ? units : bookkeeping;
}

// As launch_activation.
void launch_weight(const WeightLaunch& w, const ExecContext& ctx) {
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  if (amax_in_cast(w.amax, ctx)) {
    bool launched = false;
    dispatch_input(w.dtype, [&](auto k) {
      constexpr int K = decltype(k)::value;
      auto kernel = current_weight_kernel<K>;
      const int ctas = device_wide_ctas(reinterpret_cast<const void*>(kernel), kThreads, w.smem,
                                        ctx.device.index);
      const int64_t grid = w.wanted < 1 ? 1 : (w.wanted < ctas ? w.wanted : ctas);
      launched = launch_cooperative(kernel, grid, w.smem, stream, w.p, w.amax);
    });
    if (launched) return;
  }
  launch_amax(w.amax, AmaxPass{}, stream);
  dispatch_input(w.dtype, [&](auto k) {
    constexpr int K = decltype(k)::value;
    auto kernel = w.block ? quantize_weight_kernel<K, true> : quantize_weight_kernel<K, false>;
    const int ctas =
        device_wide_ctas(reinterpret_cast<const void*>(kernel), kThreads, w.smem, ctx.device.index);
    const int64_t grid = w.wanted < 1 ? 1 : (w.wanted < ctas ? w.wanted : ctas);
    cuda::launch_dependent(kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads), w.smem,
                           static_cast<cudaStream_t>(ctx.stream), ctx.device.index, w.p);
  });
}

void quantize_weight_cuda(const WeightQuantize& r, const ExecContext& ctx) {
  CallWorkspace ws(ctx);
  WeightLaunch w;
  prepare_weight(r, ctx, ws, w);
  if (!w.empty) launch_weight(w, ctx);
}

// ---------------------------------------------------------------------------
// A forward's two casts.

// Up to how many waves of quantize_forward_kernel's CTAs the two casts share
// one launch. Each CTA takes one tile, so a second wave only starts CTAs as
// the first ones finish, with no CTA waiting on another: two waves keep the
// host table's casts in one launch at 128 experts (512 weight tiles and the
// input's beside them), while large calls, whose cost is the device's, keep
// each cast's own grid.
constexpr int kForwardTogetherWaves = 2;

// quantize_forward_kernel when both casts fit in kForwardTogetherWaves waves
// of it, one CTA a tile (or a weight's per-group bookkeeping). Returns false,
// launching nothing, when they do not fit.
template <int K, bool kBlockScaled, typename Sizes>
bool launch_forward_together(const ActivationLaunch& a, const Sizes& sizes, const WeightLaunch& w,
                             const ExecContext& ctx) {
  auto kernel = quantize_forward_kernel<K, kBlockScaled, Sizes>;
  const size_t smem = a.smem > w.smem ? a.smem : w.smem;
  const int ctas =
      device_wide_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem, ctx.device.index);
  int64_t activation_ctas = a.units_bound < 1 ? 1 : a.units_bound;
  int64_t weight_ctas = w.wanted < 1 ? 1 : w.wanted;
  if (activation_ctas + weight_ctas > int64_t{kForwardTogetherWaves} * ctas) return false;
  if constexpr (!kBlockScaled) {
    if (amax_in_cast(a.amax, ctx) || amax_in_cast(w.amax, ctx)) {
      // One wave (a cooperative grid), shared in proportion to the tiles.
      auto current = current_forward_kernel<K, Sizes>;
      const int64_t wave = device_wide_ctas(reinterpret_cast<const void*>(current), kThreads, smem,
                                            ctx.device.index);
      const int64_t total = activation_ctas + weight_ctas;
      if (total > wave && wave >= 2) {
        activation_ctas = std::max<int64_t>(1, activation_ctas * wave / total);
        weight_ctas = std::max<int64_t>(1, wave - activation_ctas);
      }
      if (activation_ctas + weight_ctas <= wave &&
          launch_cooperative(current, activation_ctas + weight_ctas, smem,
                             static_cast<cudaStream_t>(ctx.stream), a.p, sizes, w.p,
                             static_cast<int>(activation_ctas), a.amax, w.amax))
        return true;
      return false;  // the two casts launch their amax passes themselves
    }
  }
  cuda::launch_dependent(kernel, dim3(static_cast<unsigned>(activation_ctas + weight_ctas)),
                         dim3(kThreads), smem, static_cast<cudaStream_t>(ctx.stream),
                         ctx.device.index, a.p, sizes, w.p, static_cast<int>(activation_ctas));
  return true;
}

void quantize_forward_cuda(const ActivationQuantize& x, const WeightQuantize& w,
                           const ExecContext& ctx) {
  CallWorkspace ws(ctx);
  ActivationLaunch a;
  prepare_activation(x, ctx, ws, a);
  WeightLaunch wl;
  prepare_weight(w, ctx, ws, wl);
  // Current scaling without cooperative launches: both amax passes in one
  // launch where the inputs are of one kind (a float32 weight under
  // torch.autocast is not), and the casts after it need none of their own.
  const bool cooperative = cooperative_casts(ctx);
  if (!cooperative &&
      (wl.amax.ctas() == 0 || a.amax.ctas() == 0 || a.amax.dtype == wl.amax.dtype)) {
    launch_amax(a.amax, wl.amax, static_cast<cudaStream_t>(ctx.stream));
    a.amax = AmaxPass{};  // the partials stay where the casts read them
    wl.amax = AmaxPass{};
  }
  if (wl.empty) {
    launch_activation(a, ctx);
    return;
  }
  // 16-bit inputs (those a model trains in) of one recipe kind; float32
  // inputs keep their two launches.
  bool together = false;
  if (a.dtype == wl.dtype && a.block == wl.block && a.dtype != DType::kFloat32) {
    a.with_sizes([&](const auto& sizes) {
      using Sizes = std::decay_t<decltype(sizes)>;
      const bool bf16 = a.dtype == DType::kBFloat16;
      if (a.block)
        together = bf16 ? launch_forward_together<kInBF16, true, Sizes>(a, sizes, wl, ctx)
                        : launch_forward_together<kInF16, true, Sizes>(a, sizes, wl, ctx);
      else
        together = bf16 ? launch_forward_together<kInBF16, false, Sizes>(a, sizes, wl, ctx)
                        : launch_forward_together<kInF16, false, Sizes>(a, sizes, wl, ctx);
    });
  }
  GL_LOG_INFO("FP8 forward casts: X and W in ", together ? "one launch" : "two launches", " (",
              a.units_bound, " + ", wl.wanted, " tiles)",
              x.kind != RecipeKind::kCurrent ? ""
              : cooperative                  ? "; current scaling's amax inside the casts"
                                             : "; current scaling's amax in a launch before");
  if (together) return;
  launch_activation(a, ctx);
  launch_weight(wl, ctx);
}

}  // namespace
}  // namespace grouped_linear::fp8::cuda_impl

namespace grouped_linear::fp8 {

namespace {
const QuantizeOpsBackend kCudaOps = {
    &cuda_impl::quantize_activation_cuda, &cuda_impl::quantize_weight_cuda,
    &cuda_impl::quantize_forward_cuda,    &cuda_impl::dequantize_activation_cuda,
    &cuda_impl::dequantize_weight_cuda,   &cuda_impl::update_delayed_scaling_cuda};

// Registration at load, for binaries that link this object; bindings also
// call register_cuda_quantize_ops() (through register_cuda_engines), since a
// static library's object that nothing references is not linked at all.
[[maybe_unused]] const bool kRegistered =
    (register_quantize_ops(DeviceType::kCUDA, &kCudaOps), true);
}  // namespace

void register_cuda_quantize_ops() { register_quantize_ops(DeviceType::kCUDA, &kCudaOps); }

}  // namespace grouped_linear::fp8
