#include "torch_binding/grouped_ops.h"

#include <c10/core/DeviceGuard.h>

#include "core/engine_registry.h"
#include "core/error.h"
#include "core/log.h"
#include "core/nvtx.h"
#include "torch_binding/exec_context.h"
#include "torch_binding/tensor_views.h"

namespace grouped_linear::torch_binding {
namespace {

void check_same_device(const at::Tensor& t, const char* name, const at::Tensor& ref,
                       const char* ref_name) {
  GL_CHECK_VALUE(t.device() == ref.device(), name, " is on ", t.device().str(), " but ", ref_name,
                 " is on ", ref.device().str(), "; expected the same device");
}

void check_supported(const at::Tensor& t, const char* name) {
  to_core_dtype(t.scalar_type(), name);
  GL_CHECK_TYPE(at::isFloatingType(t.scalar_type()), name, ": dtype ",
                c10::toString(t.scalar_type()),
                " is not supported; expected float32, float16 or bfloat16");
}

void check_weight(const at::Tensor& weight) {
  GL_CHECK_VALUE(weight.dim() == 3,
                 "weight: expected a 3-D [groups, out_features, "
                 "in_features] tensor, got shape ",
                 weight.sizes());
  check_supported(weight, "weight");
}

// A caller-provided output must have exactly the shape, dtype and device asked.
at::Tensor output_or_new(const std::optional<at::Tensor>& out, at::IntArrayRef shape,
                         const at::TensorOptions& options, const char* name) {
  if (!out.has_value()) return at::empty(shape, options);
  const at::Tensor& t = *out;
  GL_CHECK_VALUE(t.sizes() == shape, name, ": shape ", t.sizes(), " does not match the expected ",
                 shape);
  GL_CHECK_VALUE(t.device() == options.device(), name, " is on ", t.device().str(), "; expected ",
                 options.device().str());
  GL_CHECK_VALUE(t.is_contiguous(), name, ": expected a contiguous tensor");
  return t;
}

// One line per product at info (printed once per distinct text) naming the
// engine the device's registry gave; engines add what they chose and why.
void log_product(const char* role, const GroupedGemmEngine& engine, const GroupSplits& splits,
                 int64_t rows, int64_t n, int64_t k, const at::Tensor& input) {
  GL_LOG_INFO(role, ": engine ", engine.name(), " on ", input.device().str(), " (",
              c10::toString(input.scalar_type()), ", T=", rows, ", N=", n, ", K=", k,
              ", G=", splits.num_groups, ", m_splits on the ",
              splits.device.defined() ? "device" : "host", ")");
}

}  // namespace

at::Tensor as_rows(const at::Tensor& t, int64_t cols, const char* arg_name, const char* cols_name) {
  GL_CHECK_VALUE(t.dim() >= 1, arg_name, ": expected at least 1 dimension, got a 0-D tensor");
  GL_CHECK_VALUE(t.size(-1) == cols, arg_name, ": last dimension is ", t.size(-1), "; expected ",
                 cols_name, " = ", cols);
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) rows *= t.size(d);
  // An empty tensor may carry any strides (expand gives zeros): start afresh.
  if (rows == 0 || cols == 0) return at::empty({rows, cols}, t.options());
  at::Tensor matrix = t.reshape({rows, cols});
  if (cols > 1 && matrix.stride(1) != 1) matrix = matrix.contiguous();
  if (rows > 1 && matrix.stride(0) < cols) matrix = matrix.contiguous();
  return matrix;
}

at::Tensor grouped_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           const GroupSplits& splits, const std::optional<at::Tensor>& out,
                           const std::string& engine) {
  nvtx::Range range("grouped_linear.forward");
  check_weight(weight);
  check_supported(x, "inp");
  check_same_device(x, "inp", weight, "weight");
  if (bias.defined()) check_same_device(bias, "bias", weight, "weight");
  check_split_count(splits, weight.size(0));
  const int64_t n = weight.size(1);
  c10::OptionalDeviceGuard guard(x.device());
  at::Tensor y = output_or_new(out, {x.size(0), n}, x.options(), "out");

  ForwardProblem problem;
  problem.x = matrix_view(x, "inp");
  problem.w = grouped_view(weight, "weight");
  problem.bias = bias_view(bias, "bias");
  problem.y = matrix_view(y, "out");
  problem.splits = splits.view();
  GroupedGemmEngine& chosen = engine_for(problem.x.device, engine);
  log_product("forward", chosen, splits, x.size(0), n, x.size(1), x);
  chosen.forward(problem, exec_context(x.device()));
  return y;
}

at::Tensor grouped_dgrad(const at::Tensor& dy, const at::Tensor& weight, const GroupSplits& splits,
                         const std::optional<at::Tensor>& out, const std::string& engine) {
  nvtx::Range range("grouped_linear.dgrad");
  check_weight(weight);
  check_supported(dy, "grad_output");
  check_same_device(dy, "grad_output", weight, "weight");
  check_split_count(splits, weight.size(0));
  c10::OptionalDeviceGuard guard(dy.device());
  at::Tensor dx = output_or_new(out, {dy.size(0), weight.size(2)}, dy.options(), "grad_input");

  DgradProblem problem;
  problem.dy = matrix_view(dy, "grad_output");
  problem.w = grouped_view(weight, "weight");
  problem.dx = matrix_view(dx, "grad_input");
  problem.splits = splits.view();
  GroupedGemmEngine& chosen = engine_for(problem.dy.device, engine);
  log_product("dgrad", chosen, splits, dy.size(0), weight.size(1), weight.size(2), dy);
  chosen.dgrad(problem, exec_context(dy.device()));
  return dx;
}

std::pair<at::Tensor, at::Tensor> grouped_wgrad(const at::Tensor& dy, const at::Tensor& x,
                                                const GroupSplits& splits,
                                                const WgradRequest& request) {
  nvtx::Range range("grouped_linear.wgrad");
  check_supported(dy, "grad_output");
  check_supported(x, "inp");
  check_same_device(dy, "grad_output", x, "inp");
  GL_CHECK_VALUE(dy.dim() == 2 && x.dim() == 2 && dy.size(0) == x.size(0),
                 "grad_output and inp: expected 2-D tensors with the same number of rows, got ",
                 dy.sizes(), " and ", x.sizes());
  GL_CHECK_VALUE(!request.accumulate || request.grad_weight.defined(),
                 "accumulate: needs grad_weight (the main_grad buffer) to add into");
  const int64_t groups = splits.num_groups, n = dy.size(1), k = x.size(1);
  c10::OptionalDeviceGuard guard(x.device());

  at::Tensor dw, db;
  WgradProblem problem;
  if (request.weight_grad) {
    dw = request.grad_weight.defined()
             ? output_or_new(request.grad_weight, {groups, n, k},
                             x.options().dtype(request.grad_weight.scalar_type()),
                             request.accumulate ? "main_grad" : "grad_weight")
             : at::empty({groups, n, k}, x.options());
    problem.dw = grouped_view(dw, request.accumulate ? "main_grad" : "grad_weight");
    problem.accumulate = request.accumulate;
  }
  if (request.bias_grad) {
    db = request.grad_bias.defined()
             ? output_or_new(request.grad_bias, {groups, n},
                             x.options().dtype(request.grad_bias.scalar_type()), "grad_bias")
             : at::empty({groups, n}, x.options());
    problem.dbias = bias_view(db, "grad_bias");
  }
  if (!request.weight_grad && !request.bias_grad) return {dw, db};
  problem.dy = matrix_view(dy, "grad_output");
  problem.x = matrix_view(x, "inp");
  problem.splits = splits.view();
  GroupedGemmEngine& chosen = engine_for(problem.x.device, request.engine);
  log_product("wgrad", chosen, splits, x.size(0), n, k, x);
  chosen.wgrad(problem, exec_context(x.device()));
  return {dw, db};
}

}  // namespace grouped_linear::torch_binding
