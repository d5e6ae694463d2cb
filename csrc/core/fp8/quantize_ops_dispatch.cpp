// The entry points of quantize_ops.h and delayed_scaling_ops.h: every request
// is validated here, once, before any backend writes, then handed to the
// backend registered for the context's device type.
#include <array>
#include <atomic>

#include "core/error.h"
#include "core/fp8/quantize_ops_backend.h"
#include "core/nvtx.h"

namespace grouped_linear::fp8 {
namespace {

constexpr int kBlock = 128;  // 1 x 128 (activations) and 128 x 128 (weights) blocks

std::array<std::atomic<const QuantizeOpsBackend*>, 2>& backends() {
  static std::array<std::atomic<const QuantizeOpsBackend*>, 2> table{};
  return table;
}

const QuantizeOpsBackend& backend_for(const ExecContext& ctx) {
  if (ctx.device.type == DeviceType::kCPU) return cpu_quantize_ops();
  const QuantizeOpsBackend* backend =
      backends()[static_cast<size_t>(ctx.device.type)].load(std::memory_order_acquire);
  GL_CHECK_VALUE(backend != nullptr, "FP8 quantization on ", device_type_name(ctx.device.type),
                 " is not available: this build has no CUDA support, or its CUDA library was "
                 "not registered (register_cuda_engines)");
  return *backend;
}

bool is_float_dtype(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16;
}

void check_device(const char* name, const Device& device, const ExecContext& ctx) {
  GL_CHECK_VALUE(device == ctx.device, name, " is on ", device_type_name(device.type), ":",
                 device.index, " but the call runs on ", device_type_name(ctx.device.type), ":",
                 ctx.device.index, "; expected the same device");
}

// A row-major matrix of `rows` x `cols` (at least `cols` when `min_cols`).
void check_matrix(const char* name, const MatrixView& m, int64_t rows, int64_t cols, bool min_cols,
                  const ExecContext& ctx) {
  GL_CHECK_VALUE(m.rows == rows && (min_cols ? m.cols >= cols : m.cols == cols), name,
                 ": got shape [", m.rows, ", ", m.cols, "], expected [", rows, ", ",
                 min_cols ? "at least " : "", cols, "]");
  GL_CHECK_VALUE(m.rows <= 1 || m.row_stride >= m.cols, name, ": row stride ", m.row_stride,
                 " is smaller than its ", m.cols, " columns");
  GL_CHECK_VALUE(m.data != nullptr || m.rows * m.cols == 0, name, ": has no data");
  check_device(name, m.device, ctx);
}

void check_grouped(const char* name, const GroupedMatrixView& m, int64_t groups, int64_t rows,
                   int64_t cols, const ExecContext& ctx) {
  GL_CHECK_VALUE(m.groups == groups && m.rows == rows && m.cols == cols, name, ": got shape [",
                 m.groups, ", ", m.rows, ", ", m.cols, "], expected [", groups, ", ", rows, ", ",
                 cols, "]");
  GL_CHECK_VALUE(m.rows <= 1 || m.row_stride >= m.cols, name, ": row stride ", m.row_stride,
                 " is smaller than its ", m.cols, " columns");
  GL_CHECK_VALUE(m.groups <= 1 || m.rows * m.cols == 0 ||
                     m.group_stride >= (m.rows - 1) * m.row_stride + m.cols,
                 name, ": group stride ", m.group_stride, " overlaps the groups");
  GL_CHECK_VALUE(m.data != nullptr || m.groups * m.rows * m.cols == 0, name, ": has no data");
  check_device(name, m.device, ctx);
}

void check_code_dtype(const char* name, DType dtype, Format format) {
  GL_CHECK_TYPE(dtype == code_dtype(format), name, ": dtype ", dtype_name(dtype), ", expected ",
                dtype_name(code_dtype(format)), " for this format");
}

int64_t blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }

// Per-tensor scales, or blocks of block_rows x 128 (0 x 0 reads as that
// shape); `elements` scales (a zero-size buffer may be null).
void check_scale(const char* name, const ScaleView& s, bool blockwise, int block_rows,
                 int64_t elements) {
  GL_CHECK_VALUE(s.scale_inv != nullptr || elements == 0, name, ": scale_inv is missing");
  if (blockwise) {
    GL_CHECK_VALUE(s.layout == ScaleLayout::kBlock &&
                       ((s.block_rows == block_rows && s.block_cols == kBlock) ||
                        (s.block_rows == 0 && s.block_cols == 0)),
                   name, ": expected block scales of ", block_rows, " x ", kBlock, ", got ",
                   s.layout == ScaleLayout::kBlock ? "blocks of " : "a per-tensor layout",
                   s.block_rows, " x ", s.block_cols);
  } else {
    GL_CHECK_VALUE(s.layout == ScaleLayout::kPerTensor, name,
                   ": expected a per-tensor scale, got a block layout");
  }
}

void check_splits(const GroupSizes& s, int64_t total_rows) {
  GL_CHECK_VALUE(s.num_groups >= 0, "m_splits: ", s.num_groups, " groups");
  GL_CHECK_VALUE(s.host != nullptr || s.device != nullptr || s.num_groups == 0,
                 "m_splits: no group sizes were given");
  if (s.host != nullptr) {
    validate_group_sizes(s.host, s.num_groups, total_rows);
  } else if (s.device != nullptr) {
    GL_CHECK_TYPE(s.device_dtype == DType::kInt32 || s.device_dtype == DType::kInt64,
                  "m_splits: dtype ", dtype_name(s.device_dtype),
                  " is not supported; expected int32 or int64");
  } else {
    GL_CHECK_VALUE(total_rows == 0, "m_splits: 0 groups for ", total_rows, " rows");
  }
}

bool copy_requested(const void* data, const ScaleView& s) {
  return data != nullptr || s.scale_inv != nullptr;
}

void validate(const ActivationQuantize& r, const ExecContext& ctx) {
  const MatrixView& in = r.input;
  GL_CHECK_TYPE(is_float_dtype(in.dtype), "input: dtype ", dtype_name(in.dtype),
                " is not supported; expected float32, float16 or bfloat16");
  GL_CHECK_VALUE(in.rows >= 0 && in.cols >= 0, "input: shape [", in.rows, ", ", in.cols, "]");
  check_matrix("input", in, in.rows, in.cols, false, ctx);
  GL_CHECK_VALUE(r.out.format == r.format, "out.format differs from the request's format");
  const bool block = r.kind == RecipeKind::kBlock;
  const int64_t t = in.rows, c = in.cols;
  if (copy_requested(r.out.rowwise.data, r.out.rowwise_scale)) {
    check_code_dtype("rowwise", r.out.rowwise.dtype, r.format);
    check_matrix("rowwise", r.out.rowwise, t, c, false, ctx);
    check_scale("rowwise_scale", r.out.rowwise_scale, block, 1, block ? t * blocks(c) : 1);
  }
  const bool columnwise = copy_requested(r.out.columnwise.data, r.out.columnwise_scale);
  if (columnwise || r.dbias.present) check_splits(r.splits, t);
  const int64_t groups = r.splits.num_groups;
  if (columnwise) {
    check_code_dtype("columnwise", r.out.columnwise.dtype, r.format);
    check_matrix("columnwise", r.out.columnwise, c, padded_columns(t, groups), true, ctx);
    check_scale("columnwise_scale", r.out.columnwise_scale, block, 1,
                block ? c * column_block_capacity(t, groups) : 1);
  }
  if (r.dbias.present) {
    GL_CHECK_TYPE(is_float_dtype(r.dbias.dtype), "dbias: dtype ", dtype_name(r.dbias.dtype),
                  " is not supported; expected float32, float16 or bfloat16");
    check_grouped("dbias", r.dbias, groups, 1, c, ctx);
  }
  if (r.kind == RecipeKind::kDelayed)
    GL_CHECK_VALUE(r.state.scale != nullptr, "state.scale: delayed scaling needs the scale");
}

void validate(const WeightQuantize& r, const ExecContext& ctx) {
  const GroupedMatrixView& in = r.input;
  GL_CHECK_TYPE(is_float_dtype(in.dtype), "weight: dtype ", dtype_name(in.dtype),
                " is not supported; expected float32, float16 or bfloat16");
  GL_CHECK_VALUE(in.groups >= 0 && in.rows >= 0 && in.cols >= 0, "weight: shape [", in.groups, ", ",
                 in.rows, ", ", in.cols, "]");
  check_grouped("weight", in, in.groups, in.rows, in.cols, ctx);
  GL_CHECK_VALUE(r.out.format == r.format, "out.format differs from the request's format");
  const bool block = r.kind == RecipeKind::kBlock;
  const int64_t scales = block ? in.groups * blocks(in.rows) * blocks(in.cols) : in.groups;
  if (copy_requested(r.out.rowwise.data, r.out.rowwise_scale)) {
    check_code_dtype("rowwise", r.out.rowwise.dtype, r.format);
    check_grouped("rowwise", r.out.rowwise, in.groups, in.rows, in.cols, ctx);
    check_scale("rowwise_scale", r.out.rowwise_scale, block, kBlock, scales);
  }
  if (copy_requested(r.out.columnwise.data, r.out.columnwise_scale)) {
    check_code_dtype("columnwise", r.out.columnwise.dtype, r.format);
    check_grouped("columnwise", r.out.columnwise, in.groups, in.cols, in.rows, ctx);
    check_scale("columnwise_scale", r.out.columnwise_scale, block, kBlock, scales);
  }
  if (r.kind == RecipeKind::kDelayed)
    GL_CHECK_VALUE(r.state.scale != nullptr || in.groups == 0,
                   "state.scale: delayed scaling needs the scales");
}

void check_float32_out(DType dtype) {
  GL_CHECK_TYPE(dtype == DType::kFloat32, "out: dtype ", dtype_name(dtype),
                " is not supported; expected float32");
}

void validate_dequantize(const QuantizedActivation& q, bool columnwise, const GroupSizes& splits,
                         const MatrixView& out, const ExecContext& ctx) {
  check_float32_out(out.dtype);
  GL_CHECK_VALUE(out.rows >= 0 && out.cols >= 0, "out: shape [", out.rows, ", ", out.cols, "]");
  check_matrix("out", out, out.rows, out.cols, false, ctx);
  const ScaleView& s = columnwise ? q.columnwise_scale : q.rowwise_scale;
  const bool block = s.layout == ScaleLayout::kBlock;
  const int64_t t = out.rows, c = out.cols;
  if (columnwise) check_splits(splits, t);
  const int64_t scales = !block       ? 1
                         : columnwise ? c * column_block_capacity(t, splits.num_groups)
                                      : t * blocks(c);
  check_scale(columnwise ? "columnwise_scale" : "rowwise_scale", s, block, 1, scales);
  if (columnwise) {
    check_code_dtype("columnwise", q.columnwise.dtype, q.format);
    check_matrix("columnwise", q.columnwise, out.cols, padded_columns(out.rows, splits.num_groups),
                 true, ctx);
  } else {
    check_code_dtype("rowwise", q.rowwise.dtype, q.format);
    check_matrix("rowwise", q.rowwise, out.rows, out.cols, false, ctx);
  }
}

void validate_dequantize(const QuantizedWeight& q, bool columnwise, const GroupedMatrixView& out,
                         const ExecContext& ctx) {
  check_float32_out(out.dtype);
  GL_CHECK_VALUE(out.groups >= 0 && out.rows >= 0 && out.cols >= 0, "out: shape [", out.groups,
                 ", ", out.rows, ", ", out.cols, "]");
  check_grouped("out", out, out.groups, out.rows, out.cols, ctx);
  const ScaleView& s = columnwise ? q.columnwise_scale : q.rowwise_scale;
  const bool block = s.layout == ScaleLayout::kBlock;
  const int64_t scales = block ? out.groups * blocks(out.rows) * blocks(out.cols) : out.groups;
  check_scale(columnwise ? "columnwise_scale" : "rowwise_scale", s, block, kBlock, scales);
  if (columnwise) {
    check_code_dtype("columnwise", q.columnwise.dtype, q.format);
    check_grouped("columnwise", q.columnwise, out.groups, out.cols, out.rows, ctx);
  } else {
    check_code_dtype("rowwise", q.rowwise.dtype, q.format);
    check_grouped("rowwise", q.rowwise, out.groups, out.rows, out.cols, ctx);
  }
}

void validate(const DelayedScalingUpdate* sets, int count) {
  GL_CHECK_VALUE(count >= 0 && (sets != nullptr || count == 0), "delayed scaling: ", count,
                 " tensor sets");
  for (int i = 0; i < count; ++i) {
    const DelayedScalingGroup& g = sets[i].group;
    GL_CHECK_VALUE(g.history_len >= 1 && g.num_tensors >= 0, "amax_history of set ", i,
                   ": got shape [", g.history_len, ", ", g.num_tensors,
                   "], expected at least one row");
    GL_CHECK_VALUE(g.num_tensors == 0 ||
                       (g.history != nullptr && g.scale != nullptr && g.scale_inv != nullptr),
                   "delayed scaling set ", i, ": history, scale and scale_inv are required");
    GL_CHECK_VALUE(sets[i].fp8_max > 0.f, "delayed scaling set ", i, ": fp8_max is ",
                   sets[i].fp8_max, ", expected the format's largest value");
  }
}

}  // namespace

void register_quantize_ops(DeviceType type, const QuantizeOpsBackend* backend) {
  backends()[static_cast<size_t>(type)].store(backend, std::memory_order_release);
}

void quantize_activation(const ActivationQuantize& request, const ExecContext& ctx) {
  nvtx::Range range("grouped_linear.fp8_quantize_activation");
  validate(request, ctx);
  backend_for(ctx).quantize_activation(request, ctx);
}

void quantize_weight(const WeightQuantize& request, const ExecContext& ctx) {
  nvtx::Range range("grouped_linear.fp8_quantize_weight");
  validate(request, ctx);
  backend_for(ctx).quantize_weight(request, ctx);
}

void quantize_forward_operands(const ActivationQuantize& x, const WeightQuantize& w,
                               const ExecContext& ctx) {
  nvtx::Range range("grouped_linear.fp8_quantize_forward_operands");
  validate(x, ctx);
  validate(w, ctx);
  backend_for(ctx).quantize_forward_operands(x, w, ctx);
}

void dequantize_activation(const QuantizedActivation& q, bool columnwise, const GroupSizes& splits,
                           const MatrixView& out, const ExecContext& ctx) {
  validate_dequantize(q, columnwise, splits, out, ctx);
  backend_for(ctx).dequantize_activation(q, columnwise, splits, out, ctx);
}

void dequantize_weight(const QuantizedWeight& q, bool columnwise, const GroupedMatrixView& out,
                       const ExecContext& ctx) {
  validate_dequantize(q, columnwise, out, ctx);
  backend_for(ctx).dequantize_weight(q, columnwise, out, ctx);
}

void update_delayed_scaling(const DelayedScalingUpdate* sets, int count, int margin, AmaxAlgo algo,
                            bool check_finite, const ExecContext& ctx) {
  nvtx::Range range("grouped_linear.fp8_delayed_scaling_update");
  validate(sets, count);
  backend_for(ctx).update_delayed_scaling(sets, count, margin, algo, check_finite, ctx);
}

}  // namespace grouped_linear::fp8
