#include "core/cuda/cublas_engine.h"

#include <algorithm>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/group_kernels.h"
#include "core/cuda/stream_resources.h"
#include "core/log.h"

namespace grouped_linear::cuda {
namespace {

cudaDataType_t cuda_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return CUDA_R_32F;
    case DType::kFloat16: return CUDA_R_16F;
    case DType::kBFloat16: return CUDA_R_16BF;
    default: GL_CHECK(false, "cuBLAS engine: unsupported dtype ", dtype_name(dtype));
  }
}

char* byte_ptr(const void* base, DType dtype, int64_t elements) {
  return static_cast<char*>(const_cast<void*>(base)) +
         elements * static_cast<int64_t>(element_size(dtype));
}

// Host row offsets (G + 1 entries) from the group sizes: the host copy when the
// caller has one, otherwise the device copy read back. That read-back syncs the
// stream; the grouped kernels of the Hopper engine remove it.
std::vector<int64_t> row_offsets(const GroupSizes& splits, int64_t total_rows,
                                 cudaStream_t stream) {
  std::vector<int64_t> sizes;
  const int64_t* counts = splits.host;
  if (counts == nullptr) {
    sizes.resize(static_cast<size_t>(splits.num_groups));
    if (splits.device_dtype == DType::kInt64) {
      GL_CUDA_CHECK(cudaMemcpyAsync(sizes.data(), splits.device, sizes.size() * sizeof(int64_t),
                                    cudaMemcpyDeviceToHost, stream));
      GL_CUDA_CHECK(cudaStreamSynchronize(stream));
    } else {
      std::vector<int32_t> narrow(sizes.size());
      GL_CUDA_CHECK(cudaMemcpyAsync(narrow.data(), splits.device, narrow.size() * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, stream));
      GL_CUDA_CHECK(cudaStreamSynchronize(stream));
      std::copy(narrow.begin(), narrow.end(), sizes.begin());
    }
    validate_group_sizes(sizes.data(), splits.num_groups, total_rows);
    counts = sizes.data();
  }
  std::vector<int64_t> offsets(static_cast<size_t>(splits.num_groups) + 1, 0);
  for (int64_t g = 0; g < splits.num_groups; ++g) offsets[g + 1] = offsets[g] + counts[g];
  return offsets;
}

// What ran, for GROUPED_LINEAR_LOG_LEVEL=info.
void log_run(const char* role, const GroupSizes& splits) {
  GL_LOG_INFO(role, ": cublas, one cublasGemmEx per non-empty group (G=", splits.num_groups,
              splits.host != nullptr ? ", m_splits on the host)"
                                     : ", m_splits on the device: read back with one stream sync)");
}

StreamResources& resources(const ExecContext& ctx) {
  GL_CHECK(ctx.device.type == DeviceType::kCUDA, "cuBLAS engine got a non-CUDA context");
  return stream_resources(ctx.device.index, static_cast<cudaStream_t>(ctx.stream), ctx.allocator);
}

// Row-major C[m, n] = op(A) · op(B) expressed for column-major cuBLAS, which
// sees every row-major matrix as its transpose.
void gemm(cublasHandle_t handle, cublasOperation_t trans_a, cublasOperation_t trans_b, int64_t m,
          int64_t n, int64_t k, const void* a, DType a_type, int64_t lda, const void* b,
          DType b_type, int64_t ldb, void* c, DType c_type, int64_t ldc, float beta) {
  const float alpha = 1.f;
  GL_CUBLAS_CHECK(cublasGemmEx(handle, trans_a, trans_b, static_cast<int>(m), static_cast<int>(n),
                               static_cast<int>(k), &alpha, a, cuda_dtype(a_type),
                               static_cast<int>(lda), b, cuda_dtype(b_type), static_cast<int>(ldb),
                               &beta, c, cuda_dtype(c_type), static_cast<int>(ldc),
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

class CublasEngine final : public GroupedGemmEngine {
 public:
  const char* name() const override { return "cublas"; }

  void forward(const ForwardProblem& p, const ExecContext& ctx) override {
    validate(p);
    log_run("forward", p.splits);
    StreamResources& res = resources(ctx);
    const auto offsets = row_offsets(p.splits, p.x.rows, res.stream);
    if (p.bias.present) {
      for_each_group_chunk(offsets, [&](int64_t g0, int count, const int64_t* rows) {
        launch_fill_bias_rows(p.y, p.bias, g0, count, rows, res.stream);
      });
    }
    const float beta = p.bias.present ? 1.f : 0.f;
    const int64_t n = p.w.rows, k = p.w.cols;
    for (int64_t g = 0; g < p.w.groups; ++g) {
      const int64_t m = offsets[g + 1] - offsets[g];
      if (m == 0 || n == 0) continue;
      // Y_gᵀ[n, m] = W_g[k, n]ᵀ · X_gᵀ[k, m] in column-major terms.
      void* y = byte_ptr(p.y.data, p.y.dtype, offsets[g] * p.y.row_stride);
      if (k == 0) {
        if (!p.bias.present)
          GL_CUDA_CHECK(cudaMemset2DAsync(y, p.y.row_stride * element_size(p.y.dtype), 0,
                                          n * element_size(p.y.dtype), m, res.stream));
        continue;
      }
      gemm(res.cublas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k,
           byte_ptr(p.w.data, p.w.dtype, g * p.w.group_stride), p.w.dtype, p.w.row_stride,
           byte_ptr(p.x.data, p.x.dtype, offsets[g] * p.x.row_stride), p.x.dtype, p.x.row_stride, y,
           p.y.dtype, p.y.row_stride, beta);
    }
  }

  void dgrad(const DgradProblem& p, const ExecContext& ctx) override {
    validate(p);
    log_run("dgrad", p.splits);
    StreamResources& res = resources(ctx);
    const auto offsets = row_offsets(p.splits, p.dy.rows, res.stream);
    const int64_t n = p.w.rows, k = p.w.cols;
    for (int64_t g = 0; g < p.w.groups; ++g) {
      const int64_t m = offsets[g + 1] - offsets[g];
      if (m == 0 || k == 0) continue;
      void* dx = byte_ptr(p.dx.data, p.dx.dtype, offsets[g] * p.dx.row_stride);
      if (n == 0) {
        GL_CUDA_CHECK(cudaMemset2DAsync(dx, p.dx.row_stride * element_size(p.dx.dtype), 0,
                                        k * element_size(p.dx.dtype), m, res.stream));
        continue;
      }
      // dX_gᵀ[k, m] = W_gᵀ[k, n] · dY_gᵀ[n, m] in column-major terms.
      gemm(res.cublas, CUBLAS_OP_N, CUBLAS_OP_N, k, m, n,
           byte_ptr(p.w.data, p.w.dtype, g * p.w.group_stride), p.w.dtype, p.w.row_stride,
           byte_ptr(p.dy.data, p.dy.dtype, offsets[g] * p.dy.row_stride), p.dy.dtype,
           p.dy.row_stride, dx, p.dx.dtype, p.dx.row_stride, 0.f);
    }
  }

  void wgrad(const WgradProblem& p, const ExecContext& ctx) override {
    validate(p);
    log_run("wgrad", p.splits);
    StreamResources& res = resources(ctx);
    const auto offsets = row_offsets(p.splits, p.x.rows, res.stream);
    if (p.dbias.present) {
      for_each_group_chunk(offsets, [&](int64_t g0, int count, const int64_t* rows) {
        launch_bias_grad(p.dy, p.dbias, g0, count, rows, res.stream);
      });
    }
    if (!p.dw.present) return;
    const int64_t n = p.dw.rows, k = p.dw.cols;
    if (n == 0 || k == 0) return;
    const size_t dw_elem = element_size(p.dw.dtype);
    for (int64_t g = 0; g < p.dw.groups; ++g) {
      const int64_t m = offsets[g + 1] - offsets[g];
      void* dw = byte_ptr(p.dw.data, p.dw.dtype, g * p.dw.group_stride);
      if (m == 0) {
        // An empty group's gradient is zero: nothing to add, or zeros to write.
        if (!p.accumulate)
          GL_CUDA_CHECK(
              cudaMemset2DAsync(dw, p.dw.row_stride * dw_elem, 0, k * dw_elem, n, res.stream));
        continue;
      }
      // dW_gᵀ[k, n] = X_gᵀ[k, m] · dY_g[m, n] in column-major terms.
      gemm(res.cublas, CUBLAS_OP_N, CUBLAS_OP_T, k, n, m,
           byte_ptr(p.x.data, p.x.dtype, offsets[g] * p.x.row_stride), p.x.dtype, p.x.row_stride,
           byte_ptr(p.dy.data, p.dy.dtype, offsets[g] * p.dy.row_stride), p.dy.dtype,
           p.dy.row_stride, dw, p.dw.dtype, p.dw.row_stride, p.accumulate ? 1.f : 0.f);
    }
  }
};

}  // namespace

GroupedGemmEngine& cublas_engine() {
  static CublasEngine engine;
  return engine;
}

}  // namespace grouped_linear::cuda
