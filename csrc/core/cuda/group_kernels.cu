#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/group_kernels.h"

namespace grouped_linear::cuda {
namespace {

struct RowOffsets {
  int64_t begin[kGroupsPerLaunch + 1];
};

// Rows of group `local` from offsets computed on the host.
struct HostRows {
  RowOffsets offsets;
  __device__ void rows(int local, int64_t* begin, int64_t* end) const {
    *begin = offsets.begin[local];
    *end = offsets.begin[local + 1];
  }
};

// Rows of group `local` from sizes in device memory: the block sums the sizes
// before its group (at most a few thousand loads, from L2).
struct DeviceRows {
  const void* sizes;
  bool sizes_int64;
  int64_t total_rows;
  __device__ int64_t size(int g) const {
    const int64_t v =
        sizes_int64 ? static_cast<const int64_t*>(sizes)[g] : static_cast<const int32_t*>(sizes)[g];
    return v < 0 ? 0 : v;
  }
  __device__ void rows(int local, int64_t* begin, int64_t* end) const {
    __shared__ int64_t partial[32];
    const int lane = threadIdx.x + threadIdx.y * blockDim.x;
    const int threads = blockDim.x * blockDim.y;
    int64_t sum = 0;
    for (int g = lane; g < local; g += threads) sum += size(g);
    for (int offset = 16; offset > 0; offset /= 2)
      sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane % 32 == 0) partial[lane / 32] = sum;
    __syncthreads();
    int64_t before = 0;
    for (int w = 0; w < threads / 32; ++w) before += partial[w];
    *begin = before < total_rows ? before : total_rows;
    const int64_t stop = before + size(local);
    *end = stop < total_rows ? stop : total_rows;
  }
};

template <typename T>
__device__ __forceinline__ float to_float(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float to_float<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// grid: (column tiles, groups, row slices); block: 256 threads along columns.
template <typename Out, typename Bias, typename Rows>
__global__ void fill_bias_rows_kernel(Out* y, int64_t y_stride, const Bias* bias,
                                      int64_t bias_group_stride, int64_t n, int64_t group0,
                                      Rows group_rows) {
  const int local = blockIdx.y;
  int64_t begin, end;
  group_rows.rows(local, &begin, &end);
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= n) return;
  const Out value = from_float<Out>(to_float(bias[(group0 + local) * bias_group_stride + col]));
  for (int64_t row = begin + blockIdx.z; row < end; row += gridDim.z)
    y[row * y_stride + col] = value;
}

// grid: (column tiles of 32, groups); block: 32 columns x 8 row lanes.
template <typename In, typename Out, typename Rows>
__global__ void bias_grad_kernel(const In* dy, int64_t dy_stride, Out* dbias,
                                 int64_t dbias_group_stride, int64_t n, int64_t group0,
                                 Rows group_rows) {
  __shared__ float partial[8][33];
  const int local = blockIdx.y;
  int64_t begin, end;
  group_rows.rows(local, &begin, &end);
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float sum = 0.f;
  if (col < n) {
    for (int64_t row = begin + threadIdx.y; row < end; row += 8)
      sum += to_float(dy[row * dy_stride + col]);
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    float total = 0.f;
    for (int lane = 0; lane < 8; ++lane) total += partial[lane][threadIdx.x];
    dbias[(group0 + local) * dbias_group_stride + col] = from_float<Out>(total);
  }
}

HostRows pack(const int64_t* row_offsets, int count) {
  HostRows packed{};
  for (int i = 0; i <= count; ++i) packed.offsets.begin[i] = row_offsets[i];
  return packed;
}

template <typename Fn>
void dispatch_float(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: fn(float{}); return;
    case DType::kFloat16: fn(__half{}); return;
    case DType::kBFloat16: fn(__nv_bfloat16{}); return;
    default: GL_CHECK(false, "unsupported dtype ", dtype_name(dtype));
  }
}

template <typename Rows>
void fill_bias_rows(const MatrixView& y, const GroupedMatrixView& bias, int64_t group0, int count,
                    unsigned row_slices, const Rows& rows, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((y.cols + 255) / 256), count, row_slices);
  dispatch_float(y.dtype, [&](auto out_tag) {
    using Out = decltype(out_tag);
    dispatch_float(bias.dtype, [&](auto bias_tag) {
      using Bias = decltype(bias_tag);
      fill_bias_rows_kernel<Out, Bias, Rows><<<grid, 256, 0, stream>>>(
          static_cast<Out*>(y.data), y.row_stride, static_cast<const Bias*>(bias.data),
          bias.group_stride, y.cols, group0, rows);
      GL_CUDA_CHECK_LAUNCH();
    });
  });
}

template <typename Rows>
void bias_grad(const MatrixView& dy, const GroupedMatrixView& dbias, int64_t group0, int count,
               const Rows& rows, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((dy.cols + 31) / 32), count);
  const dim3 block(32, 8);
  dispatch_float(dy.dtype, [&](auto in_tag) {
    using In = decltype(in_tag);
    dispatch_float(dbias.dtype, [&](auto out_tag) {
      using Out = decltype(out_tag);
      bias_grad_kernel<In, Out, Rows><<<grid, block, 0, stream>>>(
          static_cast<const In*>(dy.data), dy.row_stride, static_cast<Out*>(dbias.data),
          dbias.group_stride, dy.cols, group0, rows);
      GL_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

void launch_fill_bias_rows(const MatrixView& y, const GroupedMatrixView& bias, int64_t group0,
                           int count, const int64_t* row_offsets, cudaStream_t stream) {
  if (count == 0 || y.cols == 0 || row_offsets[count] == row_offsets[0]) return;
  // Spread long groups over several blocks so a big group does not serialise.
  const int64_t rows = row_offsets[count] - row_offsets[0];
  const unsigned slices =
      static_cast<unsigned>(std::min<int64_t>(64, (rows / count + 31) / 32 + 1));
  fill_bias_rows(y, bias, group0, count, slices, pack(row_offsets, count), stream);
}

void launch_bias_grad(const MatrixView& dy, const GroupedMatrixView& dbias, int64_t group0,
                      int count, const int64_t* row_offsets, cudaStream_t stream) {
  if (count == 0 || dy.cols == 0) return;
  bias_grad(dy, dbias, group0, count, pack(row_offsets, count), stream);
}

void launch_fill_bias_rows_device_sizes(const MatrixView& y, const GroupedMatrixView& bias,
                                        const void* sizes, bool sizes_int64, int num_groups,
                                        cudaStream_t stream) {
  if (num_groups == 0 || y.cols == 0 || y.rows == 0) return;
  const unsigned slices =
      static_cast<unsigned>(std::min<int64_t>(64, (y.rows / num_groups + 31) / 32 + 1));
  fill_bias_rows(y, bias, 0, num_groups, slices, DeviceRows{sizes, sizes_int64, y.rows}, stream);
}

void launch_bias_grad_device_sizes(const MatrixView& dy, const GroupedMatrixView& dbias,
                                   const void* sizes, bool sizes_int64, int num_groups,
                                   cudaStream_t stream) {
  if (num_groups == 0 || dy.cols == 0) return;
  bias_grad(dy, dbias, 0, num_groups, DeviceRows{sizes, sizes_int64, dy.rows}, stream);
}

}  // namespace grouped_linear::cuda
