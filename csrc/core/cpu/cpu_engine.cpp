#include "core/cpu/cpu_engine.h"

#include <vector>

#include "core/cpu/float_convert.h"
#include "core/error.h"

namespace grouped_linear::cpu {
namespace {

float load(const void* base, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<const float*>(base)[index];
    case DType::kFloat16: return fp16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    default: GL_CHECK(false, "cpu engine: cannot read dtype ", dtype_name(dtype));
  }
}

void store(void* base, DType dtype, int64_t index, float value) {
  switch (dtype) {
    case DType::kFloat32: static_cast<float*>(base)[index] = value; return;
    case DType::kFloat16: static_cast<uint16_t*>(base)[index] = float_to_fp16(value); return;
    case DType::kBFloat16: static_cast<uint16_t*>(base)[index] = float_to_bf16(value); return;
    default: GL_CHECK(false, "cpu engine: cannot write dtype ", dtype_name(dtype));
  }
}

// Rows [row0, row0 + rows) of a matrix view, widened to float32 and packed.
std::vector<float> load_rows(const MatrixView& m, int64_t row0, int64_t rows) {
  std::vector<float> out(static_cast<size_t>(rows * m.cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c)
      out[r * m.cols + c] = load(m.data, m.dtype, (row0 + r) * m.row_stride + c);
  return out;
}

// Group g of a grouped view, widened to float32 and packed [rows, cols].
std::vector<float> load_group(const GroupedMatrixView& m, int64_t g) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c)
      out[r * m.cols + c] = load(m.data, m.dtype, g * m.group_stride + r * m.row_stride + c);
  return out;
}

// The engine reads group sizes on the host; CPU callers always have them there.
const int64_t* host_sizes(const GroupSizes& splits) {
  GL_CHECK_VALUE(splits.host != nullptr,
                 "m_splits: the CPU engine needs group sizes in host memory");
  return splits.host;
}

class ReferenceEngine final : public GroupedGemmEngine {
 public:
  const char* name() const override { return "cpu_reference"; }

  void forward(const ForwardProblem& p, const ExecContext&) override {
    validate(p);
    const int64_t* sizes = host_sizes(p.splits);
    const int64_t n_dim = p.w.rows, k_dim = p.w.cols;
    int64_t row0 = 0;
    for (int64_t g = 0; g < p.w.groups; ++g) {
      const int64_t m_dim = sizes[g];
      if (m_dim == 0) continue;
      const std::vector<float> w = load_group(p.w, g);
      const std::vector<float> x = load_rows(p.x, row0, m_dim);
      std::vector<float> bias = p.bias.present ? load_group(p.bias, g) : std::vector<float>();
      for (int64_t m = 0; m < m_dim; ++m) {
        const float* x_row = &x[m * k_dim];
        for (int64_t n = 0; n < n_dim; ++n) {
          const float* w_row = &w[n * k_dim];
          float acc = 0.f;
          for (int64_t k = 0; k < k_dim; ++k) acc += x_row[k] * w_row[k];
          if (p.bias.present) acc += bias[n];
          store(p.y.data, p.y.dtype, (row0 + m) * p.y.row_stride + n, acc);
        }
      }
      row0 += m_dim;
    }
  }

  void dgrad(const DgradProblem& p, const ExecContext&) override {
    validate(p);
    const int64_t* sizes = host_sizes(p.splits);
    const int64_t n_dim = p.w.rows, k_dim = p.w.cols;
    std::vector<float> acc(static_cast<size_t>(k_dim));
    int64_t row0 = 0;
    for (int64_t g = 0; g < p.w.groups; ++g) {
      const int64_t m_dim = sizes[g];
      if (m_dim == 0) continue;
      const std::vector<float> w = load_group(p.w, g);
      const std::vector<float> dy = load_rows(p.dy, row0, m_dim);
      for (int64_t m = 0; m < m_dim; ++m) {
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t n = 0; n < n_dim; ++n) {
          const float scale = dy[m * n_dim + n];
          const float* w_row = &w[n * k_dim];
          for (int64_t k = 0; k < k_dim; ++k) acc[k] += scale * w_row[k];
        }
        for (int64_t k = 0; k < k_dim; ++k)
          store(p.dx.data, p.dx.dtype, (row0 + m) * p.dx.row_stride + k, acc[k]);
      }
      row0 += m_dim;
    }
  }

  void wgrad(const WgradProblem& p, const ExecContext&) override {
    validate(p);
    const int64_t* sizes = host_sizes(p.splits);
    const int64_t groups = p.dw.present ? p.dw.groups : p.dbias.groups;
    const int64_t n_dim = p.dy.cols, k_dim = p.x.cols;
    int64_t row0 = 0;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t m_dim = sizes[g];
      const std::vector<float> dy = load_rows(p.dy, row0, m_dim);
      if (p.dw.present) {
        const std::vector<float> x = load_rows(p.x, row0, m_dim);
        std::vector<float> acc(static_cast<size_t>(n_dim * k_dim), 0.f);
        for (int64_t m = 0; m < m_dim; ++m)
          for (int64_t n = 0; n < n_dim; ++n) {
            const float scale = dy[m * n_dim + n];
            const float* x_row = &x[m * k_dim];
            float* acc_row = &acc[n * k_dim];
            for (int64_t k = 0; k < k_dim; ++k) acc_row[k] += scale * x_row[k];
          }
        for (int64_t n = 0; n < n_dim; ++n)
          for (int64_t k = 0; k < k_dim; ++k) {
            const int64_t index = g * p.dw.group_stride + n * p.dw.row_stride + k;
            const float prior = p.accumulate ? load(p.dw.data, p.dw.dtype, index) : 0.f;
            store(p.dw.data, p.dw.dtype, index, prior + acc[n * k_dim + k]);
          }
      }
      if (p.dbias.present) {
        for (int64_t n = 0; n < n_dim; ++n) {
          float sum = 0.f;
          for (int64_t m = 0; m < m_dim; ++m) sum += dy[m * n_dim + n];
          store(p.dbias.data, p.dbias.dtype, g * p.dbias.group_stride + n, sum);
        }
      }
      row0 += m_dim;
    }
  }
};

}  // namespace

GroupedGemmEngine& reference_engine() {
  static ReferenceEngine engine;
  return engine;
}

}  // namespace grouped_linear::cpu
