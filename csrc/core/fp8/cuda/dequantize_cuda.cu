// Dequantization on CUDA: codes * scale_inv back to float32 in the layout
// the values came from (the emulated FP8 GEMMs and the tests read these).
// Column-wise copies are transposed back through 32 x 32 shared-memory tiles.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_info.h"
#include "core/error.h"
#include "core/fp8/cuda/fp8_device.cuh"
#include "core/fp8/cuda/group_tables.cuh"
#include "core/fp8/cuda/launch_util.h"
#include "core/fp8/cuda/quantize_ops_cuda.h"

namespace grouped_linear::fp8::cuda_impl {
namespace {

constexpr int kThreads = 256;
constexpr int kBlock = 128;
constexpr int kT = 32;  // transpose tile

int64_t blocks_of(int64_t n) { return (n + kBlock - 1) / kBlock; }

// Scales of one copy: per tensor (one per group) or per block of
// block_rows x 128, block (r / block_rows, c / 128) of group g at
// g * group_step + row block * row_step + column block * col_step: a
// weight's [G][row_blocks, col_blocks], an activation's block-major
// [col_blocks, T] (fp8_tensor.h).
struct Scales {
  const float* scale_inv;
  bool block;
  int block_rows;
  int64_t group_step, row_step, col_step;
  __device__ float at(int64_t g, int64_t r, int64_t c) const {
    if (!block) return scale_inv[g];
    return scale_inv[g * group_step + r / block_rows * row_step + c / kBlock * col_step];
  }
  static Scales weight(const float* scale_inv, bool block, int64_t row_blocks, int64_t col_blocks) {
    return {scale_inv, block, kBlock, row_blocks * col_blocks, col_blocks, 1};
  }
};

// out[g][r][c] = code[g][r][c] * scale (a copy in its own layout).
__global__ void __launch_bounds__(kThreads)
    dequantize_rows_kernel(const uint8_t* codes, int64_t stride, int64_t group_stride,
                           Scales scales, Format format, int64_t groups, int64_t rows, int64_t cols,
                           float* out, int64_t out_stride, int64_t out_group_stride) {
  for (int64_t gr = blockIdx.x; gr < groups * rows; gr += gridDim.x) {
    const int64_t g = gr / rows, r = gr - g * rows;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads)
      out[g * out_group_stride + r * out_stride + c] =
          host_mul(from_fp8(codes[g * group_stride + r * stride + c], format), scales.at(g, r, c));
  }
}

// out[g][r][c] = code[g][c][r] * scale, for a weight's column-wise copy
// ([G][K, N] -> [G, N, K]); scales in the copy's layout ([G][K/128, N/128]).
__global__ void __launch_bounds__(kThreads)
    dequantize_transposed_kernel(const uint8_t* codes, int64_t stride, int64_t group_stride,
                                 Scales scales, Format format, int64_t groups, int64_t rows,
                                 int64_t cols, float* out, int64_t out_stride,
                                 int64_t out_group_stride) {
  __shared__ float tile[kT][kT + 1];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t row_tiles = (rows + kT - 1) / kT, col_tiles = (cols + kT - 1) / kT;
  for (int64_t u = blockIdx.x; u < groups * row_tiles * col_tiles; u += gridDim.x) {
    const int64_t g = u / (row_tiles * col_tiles), rem = u - g * row_tiles * col_tiles;
    const int64_t r0 = rem / col_tiles * kT, c0 = rem % col_tiles * kT;
    for (int k = ty; k < kT; k += kThreads / kT) {
      const int64_t r = r0 + tx, c = c0 + k;  // code row c, column r: consecutive bytes
      if (r < rows && c < cols)
        tile[k][tx] = host_mul(from_fp8(codes[g * group_stride + c * stride + r], format),
                               scales.at(g, c, r));
    }
    __syncthreads();
    for (int k = ty; k < kT; k += kThreads / kT) {
      const int64_t r = r0 + k, c = c0 + tx;
      if (r < rows && c < cols) out[g * out_group_stride + r * out_stride + c] = tile[tx][k];
    }
    __syncthreads();
  }
}

// An activation's column-wise copy [C, padded] -> [T, C]: row r of group g
// is column column_g + (r - row_g). Rows no group holds become 0.
template <typename Sizes>
__global__ void __launch_bounds__(kThreads)
    dequantize_activation_columnwise_kernel(const uint8_t* codes, int64_t stride,
                                            const float* scale_inv, bool block, Format format,
                                            int groups, int64_t rows, int64_t cols, float* out,
                                            int64_t out_stride,
                                            const __grid_constant__ Sizes sizes) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int64_t scan_scratch[kThreads / 32];
  __shared__ float tile[kT][kT + 1];
  const GroupTables t = group_tables_at(smem, groups);
  build_group_tables<kThreads>(sizes, groups, rows, t, scan_scratch);
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t row_tiles = (rows + kT - 1) / kT, col_tiles = (cols + kT - 1) / kT;
  const int64_t held = t.row[groups];
  for (int64_t u = blockIdx.x; u < row_tiles * col_tiles; u += gridDim.x) {
    const int64_t r0 = u / col_tiles * kT, c0 = u % col_tiles * kT;
    const int64_t r = r0 + tx;
    int g = 0;
    if (r < held) g = find_group(t.row, groups, r);
    for (int k = ty; k < kT; k += kThreads / kT) {
      const int64_t c = c0 + k;
      if (r >= rows || c >= cols) continue;
      float v = 0.f;
      if (r < held) {
        const int64_t i = r - t.row[g];
        const float s = block ? scale_inv[(t.block[g] + i / kBlock) * cols + c] : scale_inv[0];
        v = host_mul(from_fp8(codes[c * stride + t.column[g] + i], format), s);
      }
      tile[k][tx] = v;
    }
    __syncthreads();
    for (int k = ty; k < kT; k += kThreads / kT) {
      const int64_t rr = r0 + k, c = c0 + tx;
      if (rr < rows && c < cols) out[rr * out_stride + c] = tile[tx][k];
    }
    __syncthreads();
  }
}

unsigned grid_for(int64_t work, const ExecContext& ctx) {
  const int64_t cap = 8 * static_cast<int64_t>(cuda::device_info(ctx.device.index).sm_count);
  return static_cast<unsigned>(work < 1 ? 1 : (work < cap ? work : cap));
}

}  // namespace

void dequantize_activation_cuda(const QuantizedActivation& q, bool columnwise,
                                const GroupSizes& splits, const MatrixView& out,
                                const ExecContext& ctx) {
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  const int64_t t = out.rows, c = out.cols;
  float* y = static_cast<float*>(out.data);
  if (!columnwise) {
    if (t * c == 0) return;
    const bool block = q.rowwise_scale.layout == ScaleLayout::kBlock;
    const Scales s{q.rowwise_scale.scale_inv, block, 1, 0, 1, t};  // [blocks, T]
    dequantize_rows_kernel<<<grid_for(t, ctx), kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(q.rowwise.data), q.rowwise.row_stride, 0, s, q.format, 1, t, c,
        y, out.row_stride, 0);
    GL_CUDA_CHECK_LAUNCH();
    return;
  }
  if (t * c == 0) return;
  const int64_t groups = splits.num_groups;
  GL_CHECK_VALUE(t + kBlock * (groups + 1) < INT32_MAX, "FP8 dequantization on CUDA: ", t,
                 " rows in ", groups, " groups exceed the kernels' 32-bit row indices");
  const bool block = q.columnwise_scale.layout == ScaleLayout::kBlock;
  const size_t smem = group_tables_bytes(groups);
  const int64_t tiles = ((t + kT - 1) / kT) * ((c + kT - 1) / kT);
  CallWorkspace ws(ctx);
  auto launch = [&](const auto& sizes) {
    using Sizes = std::decay_t<decltype(sizes)>;
    auto kernel = dequantize_activation_columnwise_kernel<Sizes>;
    const int ctas =
        device_wide_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem, ctx.device.index);
    const int64_t grid = tiles < ctas ? tiles : ctas;
    kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(
        static_cast<const uint8_t*>(q.columnwise.data), q.columnwise.row_stride,
        q.columnwise_scale.scale_inv, block, q.format, static_cast<int>(groups), t, c, y,
        out.row_stride, sizes);
    GL_CUDA_CHECK_LAUNCH();
  };
  if (splits.host != nullptr && groups <= kHostSizeCapacity) {
    HostSizes host{};
    for (int64_t g = 0; g < groups; ++g) host.size[g] = static_cast<int32_t>(splits.host[g]);
    launch(host);
  } else if (splits.host != nullptr) {
    void* staged = ws.allocate(sizeof(int64_t) * groups);
    GL_CUDA_CHECK(cudaMemcpyAsync(staged, splits.host, sizeof(int64_t) * groups,
                                  cudaMemcpyHostToDevice, stream));
    launch(DeviceSizes{staged, true});
  } else {
    launch(DeviceSizes{splits.device, splits.device_dtype == DType::kInt64});
  }
}

void dequantize_weight_cuda(const QuantizedWeight& q, bool columnwise, const GroupedMatrixView& out,
                            const ExecContext& ctx) {
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  const int64_t groups = out.groups, n = out.rows, k = out.cols;
  if (groups * n * k == 0) return;
  float* y = static_cast<float*>(out.data);
  const GroupedMatrixView& src = columnwise ? q.columnwise : q.rowwise;
  const ScaleView& sv = columnwise ? q.columnwise_scale : q.rowwise_scale;
  const bool block = sv.layout == ScaleLayout::kBlock;
  if (!columnwise) {
    const Scales s = Scales::weight(sv.scale_inv, block, blocks_of(n), blocks_of(k));
    dequantize_rows_kernel<<<grid_for(groups * n, ctx), kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(src.data), src.row_stride, src.group_stride, s, q.format,
        groups, n, k, y, out.row_stride, out.group_stride);
  } else {
    const Scales s = Scales::weight(sv.scale_inv, block, blocks_of(k), blocks_of(n));
    const int64_t tiles = groups * ((n + kT - 1) / kT) * ((k + kT - 1) / kT);
    dequantize_transposed_kernel<<<grid_for(tiles, ctx), kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(src.data), src.row_stride, src.group_stride, s, q.format,
        groups, n, k, y, out.row_stride, out.group_stride);
  }
  GL_CUDA_CHECK_LAUNCH();
}

}  // namespace grouped_linear::fp8::cuda_impl
