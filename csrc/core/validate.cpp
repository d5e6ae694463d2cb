// Checks shared by every engine, so that each engine may assume a consistent
// problem and bad input fails before anything is written.
#include <string>

#include "core/error.h"
#include "core/grouped_gemm.h"

namespace grouped_linear {
namespace {

void check_operand_dtype(const char* name, DType dtype) {
  GL_CHECK_TYPE(is_gemm_operand_dtype(dtype), name, ": dtype ", dtype_name(dtype),
                " is not supported; expected float32, float16 or bfloat16");
}

// Outputs are written in the inputs' dtype or, for accumulation buffers and
// higher-precision outputs, in float32.
void check_output_dtype(const char* name, DType dtype, DType input_dtype) {
  GL_CHECK_TYPE(dtype == input_dtype || dtype == DType::kFloat32, name, ": dtype ",
                dtype_name(dtype), " is not supported; expected ", dtype_name(input_dtype),
                " or float32");
}

void check_same_dtype(const char* name, DType dtype, const char* other_name, DType other) {
  GL_CHECK_TYPE(dtype == other, "mixed dtypes: ", name, " is ", dtype_name(dtype), " but ",
                other_name, " is ", dtype_name(other), "; expected the same dtype");
}

void check_same_device(const char* name, const Device& device, const char* other_name,
                       const Device& other) {
  GL_CHECK_VALUE(device == other, name, " is on ", device_type_name(device.type), ":", device.index,
                 " but ", other_name, " is on ", device_type_name(other.type), ":", other.index,
                 "; expected the same device");
}

void check_matrix(const char* name, const MatrixView& m, int64_t rows, int64_t cols) {
  GL_CHECK_VALUE(m.rows == rows && m.cols == cols, name, ": shape [", m.rows, ", ", m.cols,
                 "] does not match the expected [", rows, ", ", cols, "]");
  GL_CHECK_VALUE(m.row_stride >= m.cols, name, ": row stride ", m.row_stride,
                 " is smaller than its ", m.cols, " columns");
}

void check_grouped(const char* name, const GroupedMatrixView& m, int64_t groups, int64_t rows,
                   int64_t cols) {
  GL_CHECK_VALUE(m.groups == groups && m.rows == rows && m.cols == cols, name, ": shape [",
                 m.groups, ", ", m.rows, ", ", m.cols, "] does not match the expected [", groups,
                 ", ", rows, ", ", cols, "]");
  GL_CHECK_VALUE(m.row_stride >= m.cols && m.group_stride >= m.rows * m.row_stride, name,
                 ": strides (", m.group_stride, ", ", m.row_stride, ") overlap rows or groups");
}

void check_splits(const GroupSizes& splits, int64_t groups, int64_t total_rows) {
  GL_CHECK_VALUE(splits.num_groups == groups, "m_splits: has ", splits.num_groups,
                 " entries; expected one per group (", groups, ")");
  GL_CHECK_VALUE(splits.host != nullptr || splits.device != nullptr,
                 "m_splits: no group sizes were given");
  GL_CHECK_TYPE(splits.device == nullptr || splits.device_dtype == DType::kInt32 ||
                    splits.device_dtype == DType::kInt64,
                "m_splits: dtype ", dtype_name(splits.device_dtype),
                " is not supported; expected int32 or int64");
  if (splits.host != nullptr) validate_group_sizes(splits.host, splits.num_groups, total_rows);
}

}  // namespace

void validate_group_sizes(const int64_t* sizes, int64_t num_groups, int64_t total_rows) {
  for (int64_t g = 0; g < num_groups; ++g)
    GL_CHECK_VALUE(sizes[g] >= 0, "m_splits: entry ", g, " is ", sizes[g],
                   "; expected a non-negative row count");
  int64_t sum = 0;
  bool overflow = false;
  for (int64_t g = 0; g < num_groups && !overflow; ++g)
    overflow = __builtin_add_overflow(sum, sizes[g], &sum);  // huge entries must not wrap to T
  GL_CHECK_VALUE(!overflow && sum == total_rows, "m_splits: sums to ",
                 overflow ? std::string("more than 2^63") : std::to_string(sum),
                 "; expected the number of input rows (", total_rows, ")");
}

void validate(const ForwardProblem& p) {
  check_operand_dtype("inp", p.x.dtype);
  check_same_dtype("inp", p.x.dtype, "weight", p.w.dtype);
  check_same_device("inp", p.x.device, "weight", p.w.device);
  const int64_t groups = p.w.groups, n = p.w.rows, k = p.w.cols, t = p.x.rows;
  GL_CHECK_VALUE(p.x.cols == k, "inp: last dimension is ", p.x.cols,
                 "; expected in_features = ", k);
  check_matrix("inp", p.x, t, k);
  check_grouped("weight", p.w, groups, n, k);
  if (p.bias.present) {
    check_same_dtype("bias", p.bias.dtype, "weight", p.w.dtype);
    check_same_device("bias", p.bias.device, "weight", p.w.device);
    check_grouped("bias", p.bias, groups, 1, n);
  }
  check_output_dtype("out", p.y.dtype, p.x.dtype);
  check_same_device("out", p.y.device, "inp", p.x.device);
  check_matrix("out", p.y, t, n);
  check_splits(p.splits, groups, t);
}

void validate(const DgradProblem& p) {
  check_operand_dtype("grad_output", p.dy.dtype);
  check_same_dtype("grad_output", p.dy.dtype, "weight", p.w.dtype);
  check_same_device("grad_output", p.dy.device, "weight", p.w.device);
  const int64_t groups = p.w.groups, n = p.w.rows, k = p.w.cols, t = p.dy.rows;
  GL_CHECK_VALUE(p.dy.cols == n, "grad_output: last dimension is ", p.dy.cols,
                 "; expected out_features = ", n);
  check_matrix("grad_output", p.dy, t, n);
  check_grouped("weight", p.w, groups, n, k);
  check_output_dtype("grad_input", p.dx.dtype, p.dy.dtype);
  check_same_device("grad_input", p.dx.device, "weight", p.w.device);
  check_matrix("grad_input", p.dx, t, k);
  check_splits(p.splits, groups, t);
}

void validate(const WgradProblem& p) {
  check_operand_dtype("grad_output", p.dy.dtype);
  check_same_dtype("grad_output", p.dy.dtype, "inp", p.x.dtype);
  check_same_device("grad_output", p.dy.device, "inp", p.x.device);
  const int64_t t = p.x.rows, n = p.dy.cols, k = p.x.cols;
  GL_CHECK_VALUE(p.dw.present || p.dbias.present,
                 "wgrad: neither a weight gradient nor a bias gradient was asked for");
  const int64_t groups = p.dw.present ? p.dw.groups : p.dbias.groups;
  check_matrix("grad_output", p.dy, t, n);
  check_matrix("inp", p.x, t, k);
  if (p.dw.present) {
    check_output_dtype(p.accumulate ? "main_grad" : "grad_weight", p.dw.dtype, p.x.dtype);
    check_same_device(p.accumulate ? "main_grad" : "grad_weight", p.dw.device, "inp", p.x.device);
    check_grouped(p.accumulate ? "main_grad" : "grad_weight", p.dw, groups, n, k);
  }
  if (p.dbias.present) {
    check_output_dtype("grad_bias", p.dbias.dtype, p.x.dtype);
    check_same_device("grad_bias", p.dbias.device, "inp", p.x.device);
    check_grouped("grad_bias", p.dbias, groups, 1, n);
  }
  check_splits(p.splits, groups, t);
}

}  // namespace grouped_linear
