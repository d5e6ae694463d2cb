#include "torch_binding/fp8_tensors.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>

#include <optional>

#include "core/error.h"
#include "core/fp8/fp8_gemm.h"
#include "torch_binding/exec_context.h"
#include "torch_binding/tensor_views.h"

namespace grouped_linear::torch_binding {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

MatrixView code_matrix(const at::Tensor& t, fp8::Format format) {
  MatrixView m;
  m.data = t.data_ptr();
  m.dtype = fp8::code_dtype(format);
  m.device = to_core_device(t.device());
  m.rows = t.size(0);
  m.cols = t.size(1);
  m.row_stride = t.size(1);
  return m;
}

GroupedMatrixView code_grouped(const at::Tensor& t, fp8::Format format) {
  GroupedMatrixView m;
  m.data = t.data_ptr();
  m.dtype = fp8::code_dtype(format);
  m.device = to_core_device(t.device());
  m.groups = t.size(0);
  m.rows = t.size(1);
  m.cols = t.size(2);
  m.row_stride = t.size(2);
  m.group_stride = t.size(1) * t.size(2);
  m.present = true;
  return m;
}

fp8::ScaleView scale_view(const at::Tensor& scale_inv, bool blockwise, int block_rows,
                          int block_cols) {
  fp8::ScaleView s;
  s.scale_inv = scale_inv.defined() ? scale_inv.data_ptr<float>() : nullptr;
  if (blockwise) {
    s.layout = fp8::ScaleLayout::kBlock;
    s.block_rows = block_rows;
    s.block_cols = block_cols;
  }
  return s;
}

at::ScalarType torch_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return at::kFloat;
    case DType::kFloat16: return at::kHalf;
    case DType::kBFloat16: return at::kBFloat16;
    default: GL_CHECK(false, "convert: unexpected dtype ", dtype_name(dtype));
  }
}

at::Tensor wrap(const GroupedMatrixView& v) {
  const at::Device device =
      v.device.type == DeviceType::kCPU
          ? at::Device(at::kCPU)
          : at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(v.device.index));
  return at::from_blob(v.data, {v.groups, v.rows, v.cols}, {v.group_stride, v.row_stride, 1},
                       at::TensorOptions().dtype(torch_dtype(v.dtype)).device(device));
}

// The emulated FP8 GEMMs' dtype conversion on devices without a core one:
// torch's copy_, queued on the current stream (the one ExecContext names).
void torch_convert(const GroupedMatrixView& src, const GroupedMatrixView& dst, const ExecContext&) {
  wrap(dst).copy_(wrap(src));
}

}  // namespace

void register_fp8_emulation() { fp8::set_convert(DeviceType::kCUDA, &torch_convert); }

at::ScalarType code_scalar_type(fp8::Format format) {
  return format == fp8::Format::kE4M3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
}

QuantizeSpec forward_spec(const fp8::Recipe& r) {
  QuantizeSpec s;
  s.kind = r.kind;
  s.format = fp8::forward_format(r);
  s.margin = r.margin;
  s.power_2_scales = r.power_2_scales;
  s.activation_block_rows = r.activation_block_rows;
  s.weight_block_rows = r.weight_block_rows;
  s.block_cols = r.block_cols;
  return s;
}

QuantizeSpec backward_spec(const fp8::Recipe& r) {
  QuantizeSpec s = forward_spec(r);
  s.format = fp8::backward_format(r);
  return s;
}

namespace {

// One copy (row- or column-wise) of a quantized operand into its core view;
// an absent copy keeps only the codes' dtype (its data pointer stays null).
template <class CodesView, class MakeCodes>
void view_copy(const at::Tensor& codes, const at::Tensor& scale_inv, const QuantizeSpec& spec,
               int block_rows, MakeCodes make_codes, CodesView& out, fp8::ScaleView& out_scale) {
  if (!codes.defined()) {
    out.dtype = fp8::code_dtype(spec.format);
    return;
  }
  out = make_codes(codes, spec.format);
  out_scale = scale_view(scale_inv, spec.blockwise(), block_rows, spec.block_cols);
}

// Quantized copies are carved from shared allocations: a copy's codes (1
// byte each) and its float32 scales, and, where the caller knows they die
// together, several copies (a forward's row-wise X and W, used by its GEMM
// only; the column-wise X and W that backward keeps; dY's two copies). Each
// region starts on a 256-byte boundary (TMA and vector loads need 16). The
// caching allocator is the largest share of an FP8 call's host time after
// the launches, so each trip saved counts. Every tensor is built on the
// block's storage directly, with no dispatcher call, and keeps the whole
// block alive: only copies that die together may share one.
struct CopyShape {
  c10::SmallVector<int64_t, 3> code_sizes, scale_sizes;
  at::ScalarType code_type = at::kByte;
  at::Tensor* codes = nullptr;
  at::Tensor* scale_inv = nullptr;
};

// The copies of one operand, row- and column-wise, before allocation.
struct OperandCopies {
  std::optional<CopyShape> row, col;
};

constexpr int64_t kRegionAlignment = 256;

int64_t align_region(int64_t bytes) {
  return (bytes + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment;
}

at::Tensor tensor_on(const at::Tensor& block, at::ScalarType type, int64_t byte_offset,
                     at::IntArrayRef sizes) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(block.storage()), block.key_set(),
                                                   c10::scalarTypeToTypeMeta(type));
  impl->set_sizes_contiguous(sizes);
  impl->set_storage_offset(byte_offset / static_cast<int64_t>(c10::elementSize(type)));
  return at::Tensor(std::move(impl));
}

// Allocates the copies given (absent ones skipped) as one block, or, with
// spec.scales_apart (the outputs of dispatcher ops, which must not share
// storage), each tensor on its own.
void allocate_together(std::initializer_list<const std::optional<CopyShape>*> copies,
                       const QuantizeSpec& spec, const at::TensorOptions& options) {
  if (spec.scales_apart) {
    for (const std::optional<CopyShape>* copy : copies) {
      if (!copy->has_value()) continue;
      const CopyShape& c = **copy;
      *c.codes = at::empty(c.code_sizes, options.dtype(c.code_type));
      *c.scale_inv = at::empty(c.scale_sizes, options.dtype(at::kFloat));
    }
    return;
  }
  // Where a copy's codes and scales start, from where the previous one ended;
  // the same walk sizes the block and then carves it.
  const auto walk = [&copies](const auto& place) {
    int64_t offset = 0;
    for (const std::optional<CopyShape>* copy : copies) {
      if (!copy->has_value()) continue;
      const CopyShape& c = **copy;
      const int64_t scales = align_region(offset + c10::multiply_integers(c.code_sizes));
      place(c, offset, scales);
      offset = align_region(scales + static_cast<int64_t>(sizeof(float)) *
                                         c10::multiply_integers(c.scale_sizes));
    }
    return offset;
  };
  const int64_t bytes = walk([](const CopyShape&, int64_t, int64_t) {});
  if (bytes == 0) return;
  const at::Tensor block = at::empty({bytes}, options.dtype(at::kByte));
  walk([&block](const CopyShape& c, int64_t codes, int64_t scales) {
    *c.codes = tensor_on(block, c.code_type, codes, c.code_sizes);
    *c.scale_inv = tensor_on(block, at::kFloat, scales, c.scale_sizes);
  });
}

}  // namespace

fp8::QuantizedActivation Fp8Activation::view() const {
  fp8::QuantizedActivation q;
  q.format = spec.format;
  view_copy(row, row_scale_inv, spec, spec.activation_block_rows, code_matrix, q.rowwise,
            q.rowwise_scale);
  view_copy(col, col_scale_inv, spec, spec.activation_block_rows, code_matrix, q.columnwise,
            q.columnwise_scale);
  return q;
}

fp8::QuantizedWeight Fp8Weight::view() const {
  fp8::QuantizedWeight q;
  q.format = spec.format;
  view_copy(row, row_scale_inv, spec, spec.weight_block_rows, code_grouped, q.rowwise,
            q.rowwise_scale);
  view_copy(col, col_scale_inv, spec, spec.weight_block_rows, code_grouped, q.columnwise,
            q.columnwise_scale);
  return q;
}

namespace {

// The copies of x [T, C] asked for; row-wise [T, C], column-wise
// [C, padded_columns(T, G)], their block scales block-major (fp8_tensor.h):
// [ceil(C/128), T] and [column_block_capacity(T, G), C]. Padding between groups is zero (written by
// the quantize op), so a GEMM tile that reads past a group's last column multiplies zeros.
OperandCopies activation_copies(const at::Tensor& x, const GroupSplits& splits,
                                const QuantizeSpec& spec, bool rowwise, bool columnwise,
                                Fp8Activation& q) {
  const int64_t t = x.size(0), c = x.size(1), groups = splits.num_groups;
  const int64_t block = spec.block_cols;
  q.spec = spec;
  q.rows = t;
  q.cols = c;
  OperandCopies copies;
  const at::ScalarType type = code_scalar_type(spec.format);
  if (rowwise) {
    copies.row = CopyShape{{t, c}, {1}, type, &q.row, &q.row_scale_inv};
    if (spec.blockwise()) copies.row->scale_sizes = {ceil_div(c, block), t};
  }
  if (columnwise) {
    copies.col =
        CopyShape{{c, fp8::padded_columns(t, groups)}, {1}, type, &q.col, &q.col_scale_inv};
    if (spec.blockwise())
      copies.col->scale_sizes = {fp8::column_block_capacity(t, groups, block), c};
  }
  return copies;
}

// The copies of w [G, N, K] asked for: row-wise [G, N, K], column-wise
// [G, K, N], with per-group or 128 x 128 block scales.
OperandCopies weight_copies(const at::Tensor& w, const QuantizeSpec& spec, bool rowwise,
                            bool columnwise, Fp8Weight& q) {
  const int64_t groups = w.size(0), n = w.size(1), k = w.size(2);
  const int64_t br = spec.weight_block_rows, bc = spec.block_cols;
  q.spec = spec;
  const at::ScalarType type = code_scalar_type(spec.format);
  const auto shape = [&](int64_t rows, int64_t cols, at::Tensor* codes, at::Tensor* scale_inv) {
    CopyShape c{{groups, rows, cols}, {groups}, type, codes, scale_inv};
    if (spec.blockwise()) c.scale_sizes = {groups, ceil_div(rows, br), ceil_div(cols, bc)};
    return c;
  };
  OperandCopies copies;
  if (rowwise) copies.row = shape(n, k, &q.row, &q.row_scale_inv);
  if (columnwise) copies.col = shape(k, n, &q.col, &q.col_scale_inv);
  return copies;
}

// The cast that fills `q`'s allocated copies.
fp8::ActivationQuantize activation_request(const at::Tensor& x, const GroupSplits& splits,
                                           const fp8::ScaleState& state, const Fp8Activation& q) {
  fp8::ActivationQuantize request;
  request.input = matrix_view(x, "inp");
  request.splits = splits.view();
  request.kind = q.spec.kind;
  request.format = q.spec.format;
  request.margin = q.spec.margin;
  request.power_2_scales = q.spec.power_2_scales;
  request.state = state;
  request.out = q.view();
  return request;
}

fp8::WeightQuantize weight_request(const at::Tensor& w, const fp8::ScaleState& state,
                                   const Fp8Weight& q) {
  fp8::WeightQuantize request;
  request.input = grouped_view(w, "weight");
  request.kind = q.spec.kind;
  request.format = q.spec.format;
  request.margin = q.spec.margin;
  request.power_2_scales = q.spec.power_2_scales;
  request.state = state;
  request.out = q.view();
  return request;
}

}  // namespace

Fp8Activation quantize_activation(const at::Tensor& x, const GroupSplits& splits,
                                  const QuantizeSpec& spec, bool rowwise, bool columnwise,
                                  const fp8::ScaleState& state, const at::Tensor& dbias,
                                  CopyLifetimes lifetimes) {
  Fp8Activation q;
  const OperandCopies copies = activation_copies(x, splits, spec, rowwise, columnwise, q);
  if (lifetimes == CopyLifetimes::kShared) {
    allocate_together({&copies.row, &copies.col}, spec, x.options());
  } else {
    allocate_together({&copies.row}, spec, x.options());
    allocate_together({&copies.col}, spec, x.options());
  }
  fp8::ActivationQuantize request = activation_request(x, splits, state, q);
  if (dbias.defined()) request.dbias = grouped_view(dbias.unsqueeze(1), "grad_bias");
  c10::OptionalDeviceGuard guard(x.device());
  fp8::quantize_activation(request, exec_context(x.device()));
  return q;
}

std::pair<Fp8Activation, Fp8Weight> quantize_forward_operands(
    const at::Tensor& x, const GroupSplits& splits, bool x_columnwise,
    const fp8::ScaleState& x_state, const at::Tensor& w, bool w_columnwise,
    const fp8::ScaleState& w_state, const QuantizeSpec& spec, ForwardLifetimes lifetimes) {
  std::pair<Fp8Activation, Fp8Weight> q;
  const OperandCopies xc =
      activation_copies(x, splits, spec, /*rowwise=*/true, x_columnwise, q.first);
  const OperandCopies wc = weight_copies(w, spec, /*rowwise=*/true, w_columnwise, q.second);
  const at::TensorOptions& options = x.options();
  switch (lifetimes) {
    case ForwardLifetimes::kWeightKept:
      allocate_together({&xc.row}, spec, options);
      allocate_together({&xc.col}, spec, options);
      allocate_together({&wc.row, &wc.col}, spec, options);
      break;
    case ForwardLifetimes::kSavedTogether:
      allocate_together({&xc.row, &wc.row}, spec, options);
      allocate_together({&xc.col, &wc.col}, spec, options);
      break;
    case ForwardLifetimes::kSavedApart:
      allocate_together({&xc.row, &wc.row}, spec, options);
      allocate_together({&xc.col}, spec, options);
      allocate_together({&wc.col}, spec, options);
      break;
  }
  const fp8::ActivationQuantize x_request = activation_request(x, splits, x_state, q.first);
  const fp8::WeightQuantize w_request = weight_request(w, w_state, q.second);
  c10::OptionalDeviceGuard guard(x.device());
  fp8::quantize_forward_operands(x_request, w_request, exec_context(x.device()));
  return q;
}

at::Tensor dequantized(const Fp8Activation& q, bool columnwise, const GroupSplits& splits) {
  const at::Tensor& codes = columnwise ? q.col : q.row;
  GL_CHECK_VALUE(codes.defined(), "dequantize: the ", columnwise ? "column" : "row",
                 "-wise copy was not made");
  at::Tensor out = at::empty({q.rows, q.cols}, codes.options().dtype(at::kFloat));
  c10::OptionalDeviceGuard guard(codes.device());
  fp8::dequantize_activation(q.view(), columnwise, splits.view(), matrix_view(out, "out"),
                             exec_context(codes.device()));
  return out;
}

at::Tensor dequantized(const Fp8Weight& q, bool columnwise) {
  const at::Tensor& codes = columnwise ? q.col : q.row;
  GL_CHECK_VALUE(codes.defined(), "dequantize: the ", columnwise ? "column" : "row",
                 "-wise copy was not made");
  const int64_t groups = codes.size(0);
  const int64_t n = columnwise ? codes.size(2) : codes.size(1);
  const int64_t k = columnwise ? codes.size(1) : codes.size(2);
  at::Tensor out = at::empty({groups, n, k}, codes.options().dtype(at::kFloat));
  c10::OptionalDeviceGuard guard(codes.device());
  fp8::dequantize_weight(q.view(), columnwise, grouped_view(out, "out"),
                         exec_context(codes.device()));
  return out;
}

}  // namespace grouped_linear::torch_binding
