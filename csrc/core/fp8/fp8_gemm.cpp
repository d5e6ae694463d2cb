// FP8 products: the engine's FP8 kernels where it has them, else the
// emulation (dequantize to float32, the engine's unquantized product with
// fp32 accumulation, then the output dtype).
#include "core/fp8/fp8_gemm.h"

#include <atomic>
#include <vector>

#include "core/cpu/float_convert.h"
#include "core/error.h"
#include "core/fp8/quantize_ops.h"
#include "core/log.h"
#include "core/nvtx.h"

namespace grouped_linear {

// Engines without FP8 kernels: run_fp8_* never call these (runs_fp8 is
// false), so reaching one means a caller skipped run_fp8_*.
void GroupedGemmEngine::fp8_forward(const fp8::ForwardProblem&, const ExecContext&) {
  GL_CHECK(false, "engine '", name(),
           "' has no FP8 forward kernel; call fp8::run_fp8_forward, which emulates it");
}
void GroupedGemmEngine::fp8_dgrad(const fp8::DgradProblem&, const ExecContext&) {
  GL_CHECK(false, "engine '", name(),
           "' has no FP8 dgrad kernel; call fp8::run_fp8_dgrad, which emulates it");
}
void GroupedGemmEngine::fp8_wgrad(const fp8::WgradProblem&, const ExecContext&) {
  GL_CHECK(false, "engine '", name(),
           "' has no FP8 wgrad kernel; call fp8::run_fp8_wgrad, which emulates it");
}

namespace fp8 {
namespace {

// ---- checks ---------------------------------------------------------------

void check_codes(const char* name, DType dtype, Format format) {
  GL_CHECK_TYPE(dtype == code_dtype(format), name, ": codes have dtype ", dtype_name(dtype),
                "; expected ", dtype_name(code_dtype(format)), " for its format");
}

void check_high_precision(const char* name, DType dtype) {
  GL_CHECK_TYPE(is_gemm_operand_dtype(dtype), name, ": dtype ", dtype_name(dtype),
                " is not supported; expected float32, float16 or bfloat16");
}

void check_device(const char* name, const Device& device, const char* other, const Device& ref) {
  GL_CHECK_VALUE(device == ref, name, " is on ", device_type_name(device.type), ":", device.index,
                 " but ", other, " is on ", device_type_name(ref.type), ":", ref.index,
                 "; expected the same device");
}

void check_shape(const char* name, const MatrixView& m, int64_t rows, int64_t cols) {
  GL_CHECK_VALUE(m.rows == rows && m.cols == cols, name, ": shape [", m.rows, ", ", m.cols,
                 "] does not match the expected [", rows, ", ", cols, "]");
  GL_CHECK_VALUE(m.rows * m.cols == 0 || m.data != nullptr, name, ": no data");
  GL_CHECK_VALUE(m.row_stride >= m.cols, name, ": row stride ", m.row_stride,
                 " is smaller than its ", m.cols, " columns");
}

void check_shape(const char* name, const GroupedMatrixView& m, int64_t groups, int64_t rows,
                 int64_t cols) {
  GL_CHECK_VALUE(m.groups == groups && m.rows == rows && m.cols == cols, name, ": shape [",
                 m.groups, ", ", m.rows, ", ", m.cols, "] does not match the expected [", groups,
                 ", ", rows, ", ", cols, "]");
  GL_CHECK_VALUE(m.groups * m.rows * m.cols == 0 || m.data != nullptr, name, ": no data");
  GL_CHECK_VALUE(m.row_stride >= m.cols && m.group_stride >= m.rows * m.row_stride, name,
                 ": strides (", m.group_stride, ", ", m.row_stride, ") overlap rows or groups");
}

void check_scale(const char* name, const ScaleView& s, bool needed) {
  GL_CHECK_VALUE(!needed || s.scale_inv != nullptr, name, ": scale_inv is missing");
  GL_CHECK_VALUE(s.layout == ScaleLayout::kPerTensor || (s.block_rows > 0 && s.block_cols > 0),
                 name, ": block scales need a positive block shape, got ", s.block_rows, "x",
                 s.block_cols);
}

void check_splits(const GroupSizes& splits, int64_t groups) {
  GL_CHECK_VALUE(splits.num_groups == groups, "m_splits: has ", splits.num_groups,
                 " entries; expected one per group (", groups, ")");
  GL_CHECK_VALUE(splits.host != nullptr || splits.device != nullptr,
                 "m_splits: no group sizes were given");
}

// ---- scratch memory ---------------------------------------------------------

// A float32 buffer on the problem's device: a host vector on the CPU, the
// caller's allocator elsewhere (given back when the scope ends; stream-ordered
// allocators make that safe right after the launches are queued).
class Scratch {
 public:
  Scratch(int64_t elements, const ExecContext& ctx) : ctx_(ctx) {
    if (elements <= 0) return;
    if (ctx.device.type == DeviceType::kCPU) {
      host_.resize(static_cast<size_t>(elements));
      data_ = host_.data();
    } else {
      GL_CHECK(ctx.allocator != nullptr, "FP8 emulation on ", device_type_name(ctx.device.type),
               " needs an allocator in its ExecContext");
      data_ = static_cast<float*>(ctx.allocator->allocate(
          static_cast<size_t>(elements) * sizeof(float), ctx.device.index, ctx.stream));
    }
  }
  ~Scratch() {
    if (data_ != nullptr && ctx_.device.type != DeviceType::kCPU) ctx_.allocator->deallocate(data_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data() const { return data_; }

 private:
  ExecContext ctx_;
  std::vector<float> host_;
  float* data_ = nullptr;
};

MatrixView float_matrix(float* data, const Device& device, int64_t rows, int64_t cols) {
  MatrixView m;
  m.data = data;
  m.dtype = DType::kFloat32;
  m.device = device;
  m.rows = rows;
  m.cols = cols;
  m.row_stride = cols;
  return m;
}

GroupedMatrixView float_grouped(float* data, const Device& device, int64_t groups, int64_t rows,
                                int64_t cols) {
  GroupedMatrixView m;
  m.data = data;
  m.dtype = DType::kFloat32;
  m.device = device;
  m.groups = groups;
  m.rows = rows;
  m.cols = cols;
  m.row_stride = cols;
  m.group_stride = rows * cols;
  m.present = true;
  return m;
}

GroupedMatrixView as_grouped(const MatrixView& m) {
  GroupedMatrixView g;
  g.data = m.data;
  g.dtype = m.dtype;
  g.device = m.device;
  g.groups = 1;
  g.rows = m.rows;
  g.cols = m.cols;
  g.row_stride = m.row_stride;
  g.group_stride = m.rows * m.row_stride;
  g.present = true;
  return g;
}

// ---- conversion ---------------------------------------------------------------

float load_element(const void* base, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<const float*>(base)[index];
    case DType::kFloat16: return cpu::fp16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::kBFloat16: return cpu::bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    default: GL_CHECK(false, "convert: cannot read dtype ", dtype_name(dtype));
  }
}

void store_element(void* base, DType dtype, int64_t index, float value) {
  switch (dtype) {
    case DType::kFloat32: static_cast<float*>(base)[index] = value; return;
    case DType::kFloat16: static_cast<uint16_t*>(base)[index] = cpu::float_to_fp16(value); return;
    case DType::kBFloat16: static_cast<uint16_t*>(base)[index] = cpu::float_to_bf16(value); return;
    default: GL_CHECK(false, "convert: cannot write dtype ", dtype_name(dtype));
  }
}

void convert_cpu(const GroupedMatrixView& src, const GroupedMatrixView& dst, const ExecContext&) {
  for (int64_t g = 0; g < src.groups; ++g)
    for (int64_t r = 0; r < src.rows; ++r)
      for (int64_t c = 0; c < src.cols; ++c)
        store_element(
            dst.data, dst.dtype, g * dst.group_stride + r * dst.row_stride + c,
            load_element(src.data, src.dtype, g * src.group_stride + r * src.row_stride + c));
}

std::atomic<ConvertFn> g_convert[2] = {&convert_cpu, nullptr};

}  // namespace

void set_convert(DeviceType device_type, ConvertFn fn) {
  g_convert[static_cast<int>(device_type)].store(fn, std::memory_order_release);
}

void convert(const GroupedMatrixView& src, const GroupedMatrixView& dst, const ExecContext& ctx) {
  GL_CHECK(src.groups == dst.groups && src.rows == dst.rows && src.cols == dst.cols,
           "convert: shapes [", src.groups, ", ", src.rows, ", ", src.cols, "] and [", dst.groups,
           ", ", dst.rows, ", ", dst.cols, "] differ");
  GL_CHECK(src.device == dst.device && src.device == ctx.device,
           "convert: source, destination and context are on different devices");
  if (src.groups * src.rows * src.cols == 0) return;
  const ConvertFn fn = g_convert[static_cast<int>(ctx.device.type)].load(std::memory_order_acquire);
  GL_CHECK(fn != nullptr, "FP8 emulation: no dtype conversion is registered for ",
           device_type_name(ctx.device.type),
           " (the binding registers one at load; a core-only program must call fp8::set_convert)");
  fn(src, dst, ctx);
}

namespace {

// A high-precision view in float32: itself, or its float32 stand-in in
// `scratch` (sized by scratch_size).
MatrixView in_float32(const MatrixView& view, Scratch& scratch) {
  if (view.dtype == DType::kFloat32) return view;
  return float_matrix(scratch.data(), view.device, view.rows, view.cols);
}

GroupedMatrixView in_float32(const GroupedMatrixView& view, Scratch& scratch) {
  if (view.dtype == DType::kFloat32) return view;
  return float_grouped(scratch.data(), view.device, view.groups, view.rows, view.cols);
}

int64_t scratch_size(const MatrixView& view) {
  return view.dtype == DType::kFloat32 ? 0 : view.rows * view.cols;
}
int64_t scratch_size(const GroupedMatrixView& view) {
  return view.present && view.dtype != DType::kFloat32 ? view.groups * view.rows * view.cols : 0;
}

}  // namespace

// ---- validation ---------------------------------------------------------------

void validate(const ForwardProblem& p) {
  const int64_t t = p.x.rowwise.rows, k = p.x.rowwise.cols;
  const int64_t groups = p.w.rowwise.groups, n = p.w.rowwise.rows;
  check_codes("inp (fp8 row-wise)", p.x.rowwise.dtype, p.x.format);
  check_codes("weight (fp8 row-wise)", p.w.rowwise.dtype, p.w.format);
  GL_CHECK_VALUE(p.w.rowwise.cols == k, "inp: last dimension is ", k,
                 "; expected in_features = ", p.w.rowwise.cols);
  check_shape("inp (fp8 row-wise)", p.x.rowwise, t, k);
  check_shape("weight (fp8 row-wise)", p.w.rowwise, groups, n, k);
  check_scale("inp (fp8 row-wise)", p.x.rowwise_scale, t * k > 0);
  check_scale("weight (fp8 row-wise)", p.w.rowwise_scale, groups * n * k > 0);
  check_device("weight", p.w.rowwise.device, "inp", p.x.rowwise.device);
  if (p.bias.present) {
    check_high_precision("bias", p.bias.dtype);
    check_shape("bias", p.bias, groups, 1, n);
    check_device("bias", p.bias.device, "inp", p.x.rowwise.device);
  }
  check_high_precision("out", p.y.dtype);
  check_shape("out", p.y, t, n);
  check_device("out", p.y.device, "inp", p.x.rowwise.device);
  check_splits(p.splits, groups);
}

void validate(const DgradProblem& p) {
  const int64_t t = p.dy.rowwise.rows, n = p.dy.rowwise.cols;
  const int64_t groups = p.w.columnwise.groups, k = p.w.columnwise.rows;
  check_codes("grad_output (fp8 row-wise)", p.dy.rowwise.dtype, p.dy.format);
  check_codes("weight (fp8 column-wise)", p.w.columnwise.dtype, p.w.format);
  GL_CHECK_VALUE(p.w.columnwise.cols == n, "grad_output: last dimension is ", n,
                 "; expected out_features = ", p.w.columnwise.cols);
  check_shape("grad_output (fp8 row-wise)", p.dy.rowwise, t, n);
  check_shape("weight (fp8 column-wise)", p.w.columnwise, groups, k, n);
  check_scale("grad_output (fp8 row-wise)", p.dy.rowwise_scale, t * n > 0);
  check_scale("weight (fp8 column-wise)", p.w.columnwise_scale, groups * n * k > 0);
  check_device("weight", p.w.columnwise.device, "grad_output", p.dy.rowwise.device);
  check_high_precision("grad_input", p.dx.dtype);
  check_shape("grad_input", p.dx, t, k);
  check_device("grad_input", p.dx.device, "grad_output", p.dy.rowwise.device);
  check_splits(p.splits, groups);
}

void validate(const WgradProblem& p) {
  const int64_t t = p.total_rows, n = p.dy.columnwise.rows, k = p.x.columnwise.rows;
  const int64_t groups = p.dw.groups;
  GL_CHECK_VALUE(t >= 0, "total_rows: got ", t, ", expected a row count >= 0");
  GL_CHECK_VALUE(p.dw.present,
                 "grad_weight: the FP8 wgrad needs an output (the bias gradient "
                 "comes from quantizing grad_output)");
  check_codes("grad_output (fp8 column-wise)", p.dy.columnwise.dtype, p.dy.format);
  check_codes("inp (fp8 column-wise)", p.x.columnwise.dtype, p.x.format);
  GL_CHECK_VALUE(p.dy.columnwise.cols >= t && p.x.columnwise.cols == p.dy.columnwise.cols,
                 "column-wise copies: grad_output has ", p.dy.columnwise.cols, " and inp ",
                 p.x.columnwise.cols, " columns; expected the same padded width >= ", t, " rows");
  check_shape("grad_output (fp8 column-wise)", p.dy.columnwise, n, p.dy.columnwise.cols);
  check_shape("inp (fp8 column-wise)", p.x.columnwise, k, p.x.columnwise.cols);
  check_scale("grad_output (fp8 column-wise)", p.dy.columnwise_scale, t * n > 0);
  check_scale("inp (fp8 column-wise)", p.x.columnwise_scale, t * k > 0);
  check_device("inp", p.x.columnwise.device, "grad_output", p.dy.columnwise.device);
  const char* dw_name = p.accumulate ? "main_grad" : "grad_weight";
  check_high_precision(dw_name, p.dw.dtype);
  check_shape(dw_name, p.dw, groups, n, k);
  check_device(dw_name, p.dw.device, "grad_output", p.dy.columnwise.device);
  check_splits(p.splits, groups);
}

// ---- emulation ----------------------------------------------------------------

void emulate_fp8_forward(GroupedGemmEngine& engine, const ForwardProblem& p,
                         const ExecContext& ctx) {
  validate(p);
  const Device device = p.x.rowwise.device;
  const int64_t t = p.x.rowwise.rows, k = p.x.rowwise.cols;
  const int64_t groups = p.w.rowwise.groups, n = p.w.rowwise.rows;
  Scratch x(t * k, ctx), w(groups * n * k, ctx);
  Scratch bias(scratch_size(p.bias), ctx), y(scratch_size(p.y), ctx);

  grouped_linear::ForwardProblem q;
  q.x = float_matrix(x.data(), device, t, k);
  q.w = float_grouped(w.data(), device, groups, n, k);
  q.y = in_float32(p.y, y);
  q.splits = p.splits;
  if (p.bias.present) {
    q.bias = in_float32(p.bias, bias);
    if (p.bias.dtype != DType::kFloat32) convert(p.bias, q.bias, ctx);
  }
  dequantize_activation(p.x, /*columnwise=*/false, p.splits, q.x, ctx);
  dequantize_weight(p.w, /*columnwise=*/false, q.w, ctx);
  engine.forward(q, ctx);
  if (p.y.dtype != DType::kFloat32) convert(as_grouped(q.y), as_grouped(p.y), ctx);
}

void emulate_fp8_dgrad(GroupedGemmEngine& engine, const DgradProblem& p, const ExecContext& ctx) {
  validate(p);
  const Device device = p.dy.rowwise.device;
  const int64_t t = p.dy.rowwise.rows, n = p.dy.rowwise.cols;
  const int64_t groups = p.w.columnwise.groups, k = p.w.columnwise.rows;
  Scratch dy(t * n, ctx), w(groups * n * k, ctx), dx(scratch_size(p.dx), ctx);

  grouped_linear::DgradProblem q;
  q.dy = float_matrix(dy.data(), device, t, n);
  q.w = float_grouped(w.data(), device, groups, n, k);  // the column-wise copy, un-transposed
  q.dx = in_float32(p.dx, dx);
  q.splits = p.splits;
  dequantize_activation(p.dy, /*columnwise=*/false, p.splits, q.dy, ctx);
  dequantize_weight(p.w, /*columnwise=*/true, q.w, ctx);
  engine.dgrad(q, ctx);
  if (p.dx.dtype != DType::kFloat32) convert(as_grouped(q.dx), as_grouped(p.dx), ctx);
}

void emulate_fp8_wgrad(GroupedGemmEngine& engine, const WgradProblem& p, const ExecContext& ctx) {
  validate(p);
  const Device device = p.dy.columnwise.device;
  const int64_t t = p.total_rows, n = p.dy.columnwise.rows, k = p.x.columnwise.rows;
  Scratch dy(t * n, ctx), x(t * k, ctx), dw(scratch_size(p.dw), ctx);

  grouped_linear::WgradProblem q;
  q.dy = float_matrix(dy.data(), device, t, n);
  q.x = float_matrix(x.data(), device, t, k);
  q.dw = in_float32(p.dw, dw);
  q.accumulate = p.accumulate;
  q.splits = p.splits;
  // A bfloat16 / float16 main_grad is accumulated in float32 and rounded once.
  if (p.accumulate && p.dw.dtype != DType::kFloat32) convert(p.dw, q.dw, ctx);
  dequantize_activation(p.dy, /*columnwise=*/true, p.splits, q.dy, ctx);
  dequantize_activation(p.x, /*columnwise=*/true, p.splits, q.x, ctx);
  engine.wgrad(q, ctx);
  if (p.dw.dtype != DType::kFloat32) convert(q.dw, p.dw, ctx);
}

// ---- dispatch -----------------------------------------------------------------

namespace {

// One role: validate, then the engine's FP8 kernels where it has them, else
// the emulation (said once per distinct case at GROUPED_LINEAR_LOG_LEVEL=info).
template <class Problem, class Native, class Emulate>
void run_role(const char* range_name, const char* role, GroupedGemmEngine& engine, const Problem& p,
              const ExecContext& ctx, Native native, Emulate emulate) {
  nvtx::Range range(range_name);
  validate(p);
  if (engine.runs_fp8(p, ctx)) {
    native();
    return;
  }
  GL_LOG_INFO("FP8 ", role, ": engine ", engine.name(),
              " has no FP8 kernel for this problem (scaling, dtype or shape); "
              "running the emulation (dequantize to float32, float32 product)");
  emulate();
}

}  // namespace

void run_fp8_forward(GroupedGemmEngine& engine, const ForwardProblem& p, const ExecContext& ctx) {
  run_role(
      "grouped_linear.fp8_forward", "forward", engine, p, ctx, [&] { engine.fp8_forward(p, ctx); },
      [&] { emulate_fp8_forward(engine, p, ctx); });
}

void run_fp8_dgrad(GroupedGemmEngine& engine, const DgradProblem& p, const ExecContext& ctx) {
  run_role(
      "grouped_linear.fp8_dgrad", "dgrad", engine, p, ctx, [&] { engine.fp8_dgrad(p, ctx); },
      [&] { emulate_fp8_dgrad(engine, p, ctx); });
}

void run_fp8_wgrad(GroupedGemmEngine& engine, const WgradProblem& p, const ExecContext& ctx) {
  run_role(
      "grouped_linear.fp8_wgrad", "wgrad", engine, p, ctx, [&] { engine.fp8_wgrad(p, ctx); },
      [&] { emulate_fp8_wgrad(engine, p, ctx); });
}

}  // namespace fp8
}  // namespace grouped_linear
