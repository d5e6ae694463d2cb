#include "torch_binding/fp8_gemm_ops.h"

#include <c10/core/DeviceGuard.h>

#include <optional>
#include <string>

#include "core/engine_registry.h"
#include "core/error.h"
#include "core/fp8/fp8_gemm.h"
#include "torch_binding/exec_context.h"
#include "torch_binding/group_splits.h"
#include "torch_binding/python_errors.h"
#include "torch_binding/tensor_views.h"

namespace grouped_linear::torch_binding {
namespace {

namespace py = pybind11;

fp8::Format format_of(const at::Tensor& codes, const char* name) {
  GL_CHECK_TYPE(
      codes.scalar_type() == at::kFloat8_e4m3fn || codes.scalar_type() == at::kFloat8_e5m2, name,
      ": dtype ", c10::toString(codes.scalar_type()),
      " is not supported; expected torch.float8_e4m3fn or torch.float8_e5m2");
  return codes.scalar_type() == at::kFloat8_e4m3fn ? fp8::Format::kE4M3 : fp8::Format::kE5M2;
}

fp8::ScaleView per_tensor_scale(const at::Tensor& scale_inv, int64_t count, const at::Tensor& codes,
                                const char* name) {
  GL_CHECK_TYPE(scale_inv.scalar_type() == at::kFloat, name, ": expected float32, got ",
                c10::toString(scale_inv.scalar_type()));
  GL_CHECK_VALUE(scale_inv.numel() == count && scale_inv.is_contiguous(), name, ": expected ",
                 count, " contiguous value(s), got shape ", scale_inv.sizes());
  GL_CHECK_VALUE(scale_inv.device() == codes.device(), name, " is on ", scale_inv.device().str(),
                 "; expected ", codes.device().str());
  fp8::ScaleView view;
  view.scale_inv = scale_inv.data_ptr<float>();
  return view;
}

// A 1-D scale_inv holds per-tensor values (`count` of them); a 2-D
// (activations) or 3-D (grouped weights) one holds blockwise scales in the
// layout of core/fp8/fp8_tensor.h, `block_rows` x 128 blocks, which must have
// the shape `blocks`.
fp8::ScaleView scale_of(const at::Tensor& scale_inv, int64_t count, at::IntArrayRef blocks,
                        int block_rows, const at::Tensor& codes, const char* name) {
  if (scale_inv.dim() <= 1) return per_tensor_scale(scale_inv, count, codes, name);
  GL_CHECK_TYPE(scale_inv.scalar_type() == at::kFloat, name, ": expected float32, got ",
                c10::toString(scale_inv.scalar_type()));
  GL_CHECK_VALUE(scale_inv.sizes() == blocks && scale_inv.is_contiguous(), name,
                 ": block scales must be a contiguous tensor of shape ", blocks, " (", block_rows,
                 " x 128 blocks), got ", scale_inv.sizes());
  GL_CHECK_VALUE(scale_inv.device() == codes.device(), name, " is on ", scale_inv.device().str(),
                 "; expected ", codes.device().str());
  fp8::ScaleView view;
  view.scale_inv = scale_inv.data_ptr<float>();
  view.layout = fp8::ScaleLayout::kBlock;
  view.block_rows = block_rows;
  view.block_cols = 128;
  return view;
}

int64_t blocks_of(int64_t extent) { return (extent + 127) / 128; }

at::Tensor output(const std::optional<at::Tensor>& out, at::IntArrayRef shape, at::ScalarType dtype,
                  const at::Device& device, const char* name) {
  if (!out.has_value()) return at::empty(shape, at::TensorOptions().dtype(dtype).device(device));
  GL_CHECK_VALUE(out->sizes() == shape && out->is_contiguous() && out->device() == device, name,
                 ": expected a contiguous tensor of shape ", shape, " on ", device.str(), ", got ",
                 out->sizes(), " on ", out->device().str());
  return *out;
}

GroupedGemmEngine& engine_named(const at::Device& device, const std::string& engine) {
  return engine_for(to_core_device(device), engine == "emulate" ? std::string() : engine);
}

at::Tensor fp8_forward(const at::Tensor& x, const at::Tensor& x_scale_inv, const at::Tensor& w,
                       const at::Tensor& w_scale_inv, const std::optional<at::Tensor>& bias,
                       const at::Tensor& m_splits, const std::optional<at::Tensor>& out,
                       at::ScalarType out_dtype, const std::string& engine,
                       bool split_accumulator) {
  GL_CHECK_VALUE(x.dim() == 2 && w.dim() == 3 && x.size(1) == w.size(2),
                 "inp, weight: expected [T, K] and [G, N, K], got ", x.sizes(), " and ", w.sizes());
  c10::OptionalDeviceGuard guard(x.device());
  const GroupSplits splits = splits_from_tensor(m_splits, x.device());
  check_split_count(splits, w.size(0));
  at::Tensor y = output(out, {x.size(0), w.size(1)}, out_dtype, x.device(), "out");
  fp8::ForwardProblem p;
  p.x.format = format_of(x, "inp");
  p.x.rowwise = matrix_view(x, "inp");
  p.x.rowwise_scale =
      scale_of(x_scale_inv, 1, {blocks_of(x.size(1)), x.size(0)}, 1, x, "inp_scale_inv");
  p.w.format = format_of(w, "weight");
  p.w.rowwise = grouped_view(w, "weight");
  p.w.rowwise_scale =
      scale_of(w_scale_inv, w.size(0), {w.size(0), blocks_of(w.size(1)), blocks_of(w.size(2))}, 128,
               w, "weight_scale_inv");
  if (bias.has_value()) p.bias = bias_view(*bias, "bias");
  p.y = matrix_view(y, "out");
  p.splits = splits.view();
  p.split_accumulator = split_accumulator;
  GroupedGemmEngine& e = engine_named(x.device(), engine);
  const ExecContext ctx = exec_context(x.device());
  if (engine == "emulate")
    fp8::emulate_fp8_forward(e, p, ctx);
  else
    fp8::run_fp8_forward(e, p, ctx);
  return y;
}

at::Tensor fp8_dgrad(const at::Tensor& dy, const at::Tensor& dy_scale_inv, const at::Tensor& w_t,
                     const at::Tensor& w_scale_inv, const at::Tensor& m_splits,
                     const std::optional<at::Tensor>& out, at::ScalarType out_dtype,
                     const std::string& engine, bool split_accumulator) {
  GL_CHECK_VALUE(dy.dim() == 2 && w_t.dim() == 3 && dy.size(1) == w_t.size(2),
                 "grad_output, weight_t: expected [T, N] and [G, K, N], got ", dy.sizes(), " and ",
                 w_t.sizes());
  c10::OptionalDeviceGuard guard(dy.device());
  const GroupSplits splits = splits_from_tensor(m_splits, dy.device());
  check_split_count(splits, w_t.size(0));
  at::Tensor dx = output(out, {dy.size(0), w_t.size(1)}, out_dtype, dy.device(), "out");
  fp8::DgradProblem p;
  p.dy.format = format_of(dy, "grad_output");
  p.dy.rowwise = matrix_view(dy, "grad_output");
  p.dy.rowwise_scale = scale_of(dy_scale_inv, 1, {blocks_of(dy.size(1)), dy.size(0)}, 1, dy,
                                "grad_output_scale_inv");
  p.w.format = format_of(w_t, "weight_t");
  p.w.columnwise = grouped_view(w_t, "weight_t");
  p.w.columnwise_scale = scale_of(w_scale_inv, w_t.size(0),
                                  {w_t.size(0), blocks_of(w_t.size(1)), blocks_of(w_t.size(2))},
                                  128, w_t, "weight_scale_inv");
  p.dx = matrix_view(dx, "out");
  p.splits = splits.view();
  p.split_accumulator = split_accumulator;
  GroupedGemmEngine& e = engine_named(dy.device(), engine);
  const ExecContext ctx = exec_context(dy.device());
  if (engine == "emulate")
    fp8::emulate_fp8_dgrad(e, p, ctx);
  else
    fp8::run_fp8_dgrad(e, p, ctx);
  return dx;
}

at::Tensor fp8_wgrad(const at::Tensor& dy_t, const at::Tensor& dy_scale_inv, const at::Tensor& x_t,
                     const at::Tensor& x_scale_inv, const at::Tensor& m_splits, int64_t total_rows,
                     const std::optional<at::Tensor>& out, bool accumulate,
                     at::ScalarType out_dtype, const std::string& engine, bool split_accumulator) {
  GL_CHECK_VALUE(dy_t.dim() == 2 && x_t.dim() == 2 && dy_t.size(1) == x_t.size(1),
                 "grad_output_t, inp_t: expected [N, P] and [K, P] column-wise copies, got ",
                 dy_t.sizes(), " and ", x_t.sizes());
  GL_CHECK_VALUE(!accumulate || out.has_value(), "accumulate: needs out (the main_grad buffer)");
  c10::OptionalDeviceGuard guard(x_t.device());
  const GroupSplits splits = splits_from_tensor(m_splits, x_t.device());
  const int64_t groups = splits.num_groups;
  at::Tensor dw = output(out, {groups, dy_t.size(0), x_t.size(0)},
                         out.has_value() ? out->scalar_type() : out_dtype, x_t.device(), "out");
  fp8::WgradProblem p;
  p.dy.format = format_of(dy_t, "grad_output_t");
  p.dy.columnwise = matrix_view(dy_t, "grad_output_t");
  // Column-wise block scales: [column_block_capacity(T, G), C] (fp8_tensor.h).
  const int64_t capacity = fp8::column_block_capacity(total_rows, groups);
  p.dy.columnwise_scale =
      scale_of(dy_scale_inv, 1, {capacity, dy_t.size(0)}, 1, dy_t, "grad_output_scale_inv");
  p.x.format = format_of(x_t, "inp_t");
  p.x.columnwise = matrix_view(x_t, "inp_t");
  p.x.columnwise_scale = scale_of(x_scale_inv, 1, {capacity, x_t.size(0)}, 1, x_t, "inp_scale_inv");
  p.dw = grouped_view(dw, "out");
  p.accumulate = accumulate;
  p.splits = splits.view();
  p.total_rows = total_rows;
  p.split_accumulator = split_accumulator;
  GroupedGemmEngine& e = engine_named(x_t.device(), engine);
  const ExecContext ctx = exec_context(x_t.device());
  if (engine == "emulate")
    fp8::emulate_fp8_wgrad(e, p, ctx);
  else
    fp8::run_fp8_wgrad(e, p, ctx);
  return dw;
}

}  // namespace

void register_fp8_gemm_ops(py::module_& ops) {
  ops.def("fp8_forward", guarded(&fp8_forward), py::arg("inp"), py::arg("inp_scale_inv"),
          py::arg("weight"), py::arg("weight_scale_inv"), py::arg("bias"), py::arg("m_splits"),
          py::arg("out") = py::none(), py::arg("out_dtype") = at::kBFloat16, py::arg("engine") = "",
          py::arg("split_accumulator") = true);
  ops.def("fp8_dgrad", guarded(&fp8_dgrad), py::arg("grad_output"),
          py::arg("grad_output_scale_inv"), py::arg("weight_t"), py::arg("weight_scale_inv"),
          py::arg("m_splits"), py::arg("out") = py::none(), py::arg("out_dtype") = at::kBFloat16,
          py::arg("engine") = "", py::arg("split_accumulator") = true);
  ops.def("fp8_wgrad", guarded(&fp8_wgrad), py::arg("grad_output_t"),
          py::arg("grad_output_scale_inv"), py::arg("inp_t"), py::arg("inp_scale_inv"),
          py::arg("m_splits"), py::arg("total_rows"), py::arg("out") = py::none(),
          py::arg("accumulate") = false, py::arg("out_dtype") = at::kBFloat16,
          py::arg("engine") = "", py::arg("split_accumulator") = true);
}

}  // namespace grouped_linear::torch_binding
