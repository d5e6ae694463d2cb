// The layer as dispatcher ops (namespace `grouped_linear`), for torch.compile.
//
// Eager calls keep going through _C.grouped_linear / _C.linear (one pybind
// call, C++ autograd node); the modules route through these ops only while
// dynamo traces them (python/grouped_linear/_compile.py). Every op has a
// CPU and a CUDA kernel (the same code: the engines pick the device), a Meta
// kernel (shapes, dtypes and devices only: it never reads m_splits, so a
// device m_splits is never synced) and an Autograd kernel (a C++ autograd
// Function whose backward calls the backward op through the dispatcher, so
// AOTAutograd traces it into the backward graph).
//
//   forward(inp, weight, bias?, m_splits?) -> out
//   backward(grad_output, inp, weight, m_splits?, output_mask[3]) -> (dx, dw, db)
//   fp8_forward(..., recipe, amax_history(a!)?, scale?, state_handle, ...) -> (out, saved...)
//   fp8_backward(..., recipe, amax_history(a!)?, scale?, fwd_scale?, ...) -> (dx, dw, db)
//
// m_splits: a 1-D integer tensor (CPU: read on the host by the kernel; on
// the input's device: read on the device), or None for Linear (one group of
// every row). weight: [G, N, K], or [N, K] for Linear. Outputs a call does not
// need (output_mask false, no column-wise copy) are empty tensors of shape [0].
//
// FP8: the recipe travels as int[] (recipe_ints.h), read from the autocast
// state when dynamo traces. Delayed scaling's tensors are arguments: the
// forward reads `scale` ([1 + G]: input, then one per weight) and
// max-accumulates into row 0 of `amax_history` ([H, 1 + G]); the backward
// reads scale [1] and records dY's amax into its history [H, 1]. They are
// declared mutated (Tensor(a!)), so functionalization orders and writes them
// back. `state_handle` (>= 0) names the module's Fp8ModuleState: the forward
// kernel registers it for the step boundary of the thread's autocast region,
// as an eager FP8 forward does.
#include "torch_binding/op_registration.h"

#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/engine_registry.h"
#include "core/error.h"
#include "core/fp8/fp8_gemm.h"
#include "core/fp8/fp8_tensor.h"
#include "torch_binding/exec_context.h"
#include "torch_binding/fp8_autograd.h"
#include "torch_binding/fp8_state.h"
#include "torch_binding/fp8_tensors.h"
#include "torch_binding/group_splits.h"
#include "torch_binding/grouped_ops.h"
#include "torch_binding/python_errors.h"
#include "torch_binding/recipe_ints.h"
#include "torch_binding/tensor_views.h"

namespace grouped_linear::torch_binding {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- shared helpers ---------------------------------------------------------------

at::Tensor value_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? *t : at::Tensor();
}

void check_weight(const at::Tensor& weight, bool grouped_call) {
  GL_CHECK_VALUE(weight.dim() == 3 || (weight.dim() == 2 && !grouped_call),
                 "weight: expected a 3-D [num_gemms, out_features, in_features] tensor (or 2-D "
                 "[out_features, in_features] with m_splits None), got a ",
                 weight.dim(), "-D tensor");
}

int64_t row_count(const at::Tensor& inp, int64_t k) {
  GL_CHECK_VALUE(inp.dim() >= 1, "inp: expected at least 1 dimension, got a 0-D tensor");
  GL_CHECK_VALUE(inp.size(-1) == k, "inp: last dimension is ", inp.size(-1),
                 "; expected in_features = ", k);
  return k == 0 ? 0 : inp.numel() / k;
}

// The kernels' splits: the tensor's (read on the host when on the CPU), or
// one group of every row for Linear.
GroupSplits kernel_splits(const std::optional<at::Tensor>& m_splits, const at::Tensor& inp,
                          const at::Tensor& w) {
  GroupSplits splits = m_splits.has_value() ? splits_from_tensor(*m_splits, inp.device())
                                            : splits_from_host({row_count(inp, w.size(2))});
  check_split_count(splits, w.size(0));
  return splits;
}

std::vector<c10::SymInt> output_shape(const at::Tensor& inp, const c10::SymInt& cols) {
  std::vector<c10::SymInt> shape(inp.sym_sizes().begin(), inp.sym_sizes().end());
  shape.back() = cols;
  return shape;
}

c10::SymInt sym_rows(const at::Tensor& inp) {
  c10::SymInt rows = 1;
  for (int64_t d = 0; d + 1 < inp.dim(); ++d) rows = rows * inp.sym_size(d);
  return rows;
}

at::Tensor empty_placeholder(const at::TensorOptions& options) { return at::empty({0}, options); }

// ---- state handles ------------------------------------------------------------------

std::mutex g_handles_mutex;
std::vector<std::weak_ptr<Fp8ModuleState>> g_handles;

std::shared_ptr<Fp8ModuleState> state_for(int64_t handle) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  GL_CHECK_VALUE(handle >= 0 && handle < static_cast<int64_t>(g_handles.size()),
                 "state_handle: ", handle, " names no FP8 module state");
  std::shared_ptr<Fp8ModuleState> state = g_handles[handle].lock();
  GL_CHECK_VALUE(state != nullptr, "state_handle: ", handle,
                 " names an FP8 module state that no longer exists");
  return state;
}

// ---- bf16 / fp32: forward and backward --------------------------------------------------

at::Tensor forward_kernel(const at::Tensor& inp, const at::Tensor& weight,
                          const std::optional<at::Tensor>& bias,
                          const std::optional<at::Tensor>& m_splits) {
  check_weight(weight, m_splits.has_value());
  const at::Tensor w = as_grouped_weight(weight);
  const at::Tensor x = as_rows(inp, w.size(2), "inp", "in_features");
  const GroupSplits splits = kernel_splits(m_splits, inp, w);
  std::vector<int64_t> shape(inp.sizes().begin(), inp.sizes().end());
  shape.back() = w.size(1);
  at::Tensor y = at::empty(shape, x.options());
  grouped_forward(x, w, as_grouped_bias(value_or_undefined(bias)), splits,
                  y.view({x.size(0), w.size(1)}));
  return y;
}

at::Tensor forward_meta(const at::Tensor& inp, const at::Tensor& weight,
                        const std::optional<at::Tensor>& bias,
                        const std::optional<at::Tensor>& m_splits) {
  check_weight(weight, m_splits.has_value());
  GL_CHECK_VALUE(inp.dim() >= 1, "inp: expected at least 1 dimension, got a 0-D tensor");
  return at::empty_symint(output_shape(inp, weight.sym_size(-2)), inp.options());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_kernel(
    const at::Tensor& grad_output, const at::Tensor& inp, const at::Tensor& weight,
    const std::optional<at::Tensor>& m_splits, std::array<bool, 3> mask) {
  check_weight(weight, m_splits.has_value());
  const at::Tensor w = as_grouped_weight(weight);
  const int64_t n = w.size(1);
  const GroupSplits splits = kernel_splits(m_splits, inp, w);
  const at::Tensor x = as_rows(inp, w.size(2), "inp", "in_features");
  const at::Tensor dy = as_rows(grad_output, n, "grad_output", "out_features");
  at::Tensor dx = empty_placeholder(grad_output.options());
  at::Tensor dw = empty_placeholder(weight.options());
  at::Tensor db = empty_placeholder(grad_output.options());
  if (mask[0]) dx = grouped_dgrad(dy, w, splits).view(inp.sizes());
  WgradRequest request;
  request.weight_grad = mask[1];
  request.bias_grad = mask[2];
  if (mask[1] || mask[2]) {
    auto grads = grouped_wgrad(dy, x, splits, request);
    if (mask[1]) dw = grads.first.view(weight.sizes());
    if (mask[2]) db = weight.dim() == 2 ? grads.second.view({n}) : grads.second;
  }
  return {dx, dw, db};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_meta(
    const at::Tensor& grad_output, const at::Tensor& inp, const at::Tensor& weight,
    const std::optional<at::Tensor>& m_splits, std::array<bool, 3> mask) {
  check_weight(weight, m_splits.has_value());
  at::Tensor dx = mask[0] ? at::empty_symint(inp.sym_sizes(), grad_output.options())
                          : empty_placeholder(grad_output.options());
  at::Tensor dw = mask[1] ? at::empty_symint(weight.sym_sizes(), weight.options())
                          : empty_placeholder(weight.options());
  std::vector<c10::SymInt> bias_shape(weight.sym_sizes().begin(), weight.sym_sizes().end() - 1);
  at::Tensor db = mask[2] ? at::empty_symint(bias_shape, grad_output.options())
                          : empty_placeholder(grad_output.options());
  return {dx, dw, db};
}

// ---- FP8: forward and backward -----------------------------------------------------------

fp8::ScaleState scale_state(const std::optional<at::Tensor>& scale,
                            const std::optional<at::Tensor>& history, int64_t offset) {
  fp8::ScaleState s;
  if (scale.has_value()) s.scale = scale->data_ptr<float>() + offset;
  if (history.has_value()) s.amax = history->data_ptr<float>() + offset;
  return s;
}

void check_delayed_tensors(const fp8::Recipe& recipe, const std::optional<at::Tensor>& history,
                           const std::optional<at::Tensor>& scale, int64_t columns,
                           const at::Device& device) {
  if (recipe.kind != fp8::RecipeKind::kDelayed) return;
  GL_CHECK_VALUE(history.has_value() && scale.has_value(),
                 "amax_history / scale: delayed scaling needs both (the module's FP8 state)");
  for (const at::Tensor* t : {&*history, &*scale}) {
    GL_CHECK_VALUE(t->scalar_type() == at::kFloat && t->is_contiguous() && t->device() == device,
                   "amax_history / scale: expected contiguous float32 tensors on ", device.str());
  }
  GL_CHECK_VALUE(history->dim() == 2 && history->size(1) == columns && scale->dim() == 1 &&
                     scale->size(0) == columns,
                 "amax_history / scale: shapes ", history->sizes(), " and ", scale->sizes(),
                 "; expected [H, ", columns, "] and [", columns, "]");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fp8_forward_kernel(
    const at::Tensor& inp, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& m_splits, at::IntArrayRef recipe_codes,
    const std::optional<at::Tensor>& amax_history, const std::optional<at::Tensor>& scale,
    int64_t state_handle, bool input_grad, bool weight_grad, bool save_original_input) {
  check_weight(weight, m_splits.has_value());
  const fp8::Recipe recipe = recipe_from_ints(recipe_codes);
  const at::Tensor w = as_grouped_weight(weight);
  const at::Tensor x = as_rows(inp, w.size(2), "inp", "in_features");
  const at::Tensor b = as_grouped_bias(value_or_undefined(bias));
  check_fp8_operands(x, w, b);  // as eager FP8 does, before any cast or state update
  const GroupSplits splits = kernel_splits(m_splits, inp, w);
  if (!splits.device.defined())
    validate_group_sizes(splits.host.data(), splits.num_groups, x.size(0));
  check_delayed_tensors(recipe, amax_history, scale, 1 + w.size(0), x.device());
  if (state_handle >= 0) state_for(state_handle)->begin_forward(recipe, x.device());

  const bool delayed = recipe.kind == fp8::RecipeKind::kDelayed;
  QuantizeSpec spec = forward_spec(recipe);
  spec.scales_apart = true;  // x_col, w_col and their scales are separate outputs
  const bool x_col = weight_grad && !save_original_input;
  auto [xq, wq] = quantize_forward_operands(
      x, splits, x_col, delayed ? scale_state(scale, amax_history, 0) : fp8::ScaleState{}, w,
      input_grad, delayed ? scale_state(scale, amax_history, 1) : fp8::ScaleState{}, spec);

  std::vector<int64_t> shape(inp.sizes().begin(), inp.sizes().end());
  shape.back() = w.size(1);
  at::Tensor y = at::empty(shape, x.options());
  {
    c10::OptionalDeviceGuard guard(x.device());
    fp8::ForwardProblem problem;
    problem.x = xq.view();
    problem.w = wq.view();
    problem.bias = bias_view(b, "bias");
    problem.y = matrix_view(y.view({x.size(0), w.size(1)}), "out");
    problem.splits = splits.view();
    problem.split_accumulator = recipe.fprop_split_accumulator;
    fp8::run_fp8_forward(engine_for(to_core_device(x.device())), problem, exec_context(x.device()));
  }
  const at::TensorOptions codes = x.options().dtype(code_scalar_type(spec.format));
  const at::TensorOptions floats = x.options().dtype(at::kFloat);
  return {y, x_col ? xq.col : empty_placeholder(codes),
          x_col ? xq.col_scale_inv : empty_placeholder(floats),
          input_grad ? wq.col : empty_placeholder(codes),
          input_grad ? wq.col_scale_inv : empty_placeholder(floats)};
}

c10::SymInt ceil_div_sym(const c10::SymInt& a, int64_t b) { return (a + (b - 1)) / b; }

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fp8_forward_meta(
    const at::Tensor& inp, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& m_splits, at::IntArrayRef recipe_codes,
    const std::optional<at::Tensor>& amax_history, const std::optional<at::Tensor>& scale,
    int64_t state_handle, bool input_grad, bool weight_grad, bool save_original_input) {
  check_weight(weight, m_splits.has_value());
  const fp8::Recipe recipe = recipe_from_ints(recipe_codes);
  const QuantizeSpec spec = forward_spec(recipe);
  const bool grouped = weight.dim() == 3;
  const c10::SymInt groups = grouped ? weight.sym_size(0) : c10::SymInt(1);
  const c10::SymInt n = weight.sym_size(-2), k = weight.sym_size(-1);
  const c10::SymInt t = sym_rows(inp);
  const at::TensorOptions codes = inp.options().dtype(code_scalar_type(spec.format));
  const at::TensorOptions floats = inp.options().dtype(at::kFloat);
  const bool x_col = weight_grad && !save_original_input;
  at::Tensor y = at::empty_symint(output_shape(inp, n), inp.options());
  at::Tensor xc = empty_placeholder(codes), xs = empty_placeholder(floats);
  at::Tensor wc = empty_placeholder(codes), ws = empty_placeholder(floats);
  if (x_col) {
    // fp8::padded_columns and column_block_capacity, on SymInts.
    const int64_t align = fp8::kGroupAlign;
    const c10::SymInt padded = (t + (align - 1) * groups + (align - 1)) / align * align;
    xc = at::empty_symint({k, padded}, codes);
    xs = spec.blockwise() ? at::empty_symint({ceil_div_sym(t, spec.block_cols) + groups, k}, floats)
                          : at::empty({1}, floats);
  }
  if (input_grad) {
    wc = at::empty_symint({groups, k, n}, codes);
    ws = spec.blockwise() ? at::empty_symint({groups, ceil_div_sym(k, spec.weight_block_rows),
                                              ceil_div_sym(n, spec.block_cols)},
                                             floats)
                          : at::empty_symint({groups}, floats);
  }
  return {y, xc, xs, wc, ws};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fp8_backward_kernel(
    const at::Tensor& grad_output, const at::Tensor& x_saved, const at::Tensor& x_scale_inv,
    const at::Tensor& w_col, const at::Tensor& w_col_scale_inv,
    const std::optional<at::Tensor>& m_splits, at::IntArrayRef recipe_codes,
    const std::optional<at::Tensor>& amax_history, const std::optional<at::Tensor>& scale,
    const std::optional<at::Tensor>& fwd_scale, at::IntArrayRef weight_shape,
    at::ScalarType weight_dtype, std::array<bool, 3> mask, bool keep_input) {
  const fp8::Recipe recipe = recipe_from_ints(recipe_codes);
  GL_CHECK_VALUE(weight_shape.size() == 3 || (weight_shape.size() == 2 && !m_splits.has_value()),
                 "weight_shape: expected [G, N, K] (or [N, K] with m_splits None), got ",
                 weight_shape);
  const bool grouped = weight_shape.size() == 3;
  const int64_t groups = grouped ? weight_shape[0] : 1;
  const int64_t n = weight_shape[weight_shape.size() - 2], k = weight_shape.back();
  const at::Tensor dy = as_rows(grad_output, n, "grad_output", "out_features");
  const int64_t t = dy.size(0);
  GroupSplits splits =
      m_splits.has_value() ? splits_from_tensor(*m_splits, dy.device()) : splits_from_host({t});
  check_split_count(splits, groups);
  const bool delayed = recipe.kind == fp8::RecipeKind::kDelayed;
  check_delayed_tensors(recipe, amax_history, scale, 1, dy.device());
  const at::Device device = dy.device();
  const bool input_grad = mask[0], weight_grad = mask[1], bias_grad = mask[2];

  at::Tensor grad_bias = bias_grad ? at::empty({groups, n}, dy.options()) : at::Tensor();
  const Fp8Activation dyq = quantize_grad_output(
      dy, splits, recipe, input_grad, weight_grad,
      delayed ? scale_state(scale, amax_history, 0) : fp8::ScaleState{}, grad_bias,
      CopyLifetimes::kShared);  // both die with this op

  c10::OptionalDeviceGuard guard(device);
  at::Tensor dx = empty_placeholder(grad_output.options());
  at::Tensor dw = empty_placeholder(grad_output.options().dtype(weight_dtype));
  at::Tensor db = empty_placeholder(grad_output.options());
  if (input_grad) {
    std::vector<int64_t> shape(grad_output.sizes().begin(), grad_output.sizes().end());
    shape.back() = k;
    dx = fp8_dgrad_rows(dy, dyq, splits, w_col, w_col_scale_inv, recipe, k).view(shape);
  }
  if (weight_grad) {
    const Fp8Activation xq = input_for_wgrad(
        keep_input ? as_rows(x_saved, k, "inp", "in_features") : x_saved, x_scale_inv, keep_input,
        splits, recipe, t, k,
        delayed && keep_input ? scale_state(fwd_scale, std::nullopt, 0) : fp8::ScaleState{});
    const at::Tensor target = at::empty({groups, n, k}, dy.options().dtype(weight_dtype));
    fp8::WgradProblem problem;
    problem.dy = dyq.view();
    problem.x = xq.view();
    problem.dw = grouped_view(target, "grad_weight");
    problem.splits = splits.view();
    problem.total_rows = t;
    problem.split_accumulator = recipe.wgrad_split_accumulator;
    fp8::run_fp8_wgrad(engine_for(to_core_device(device)), problem, exec_context(device));
    dw = target.view(weight_shape);
  }
  if (bias_grad) db = grouped ? grad_bias : grad_bias.view({n});
  return {dx, dw, db};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fp8_backward_meta(
    const at::Tensor& grad_output, const at::Tensor& x_saved, const at::Tensor& x_scale_inv,
    const at::Tensor& w_col, const at::Tensor& w_col_scale_inv,
    const std::optional<at::Tensor>& m_splits, at::IntArrayRef recipe_codes,
    const std::optional<at::Tensor>& amax_history, const std::optional<at::Tensor>& scale,
    const std::optional<at::Tensor>& fwd_scale, c10::SymIntArrayRef weight_shape,
    at::ScalarType weight_dtype, std::array<bool, 3> mask, bool keep_input) {
  recipe_from_ints(recipe_codes);
  GL_CHECK_VALUE(weight_shape.size() == 3 || (weight_shape.size() == 2 && !m_splits.has_value()),
                 "weight_shape: expected [G, N, K] (or [N, K] with m_splits None)");
  at::Tensor dx = empty_placeholder(grad_output.options());
  at::Tensor dw = empty_placeholder(grad_output.options().dtype(weight_dtype));
  at::Tensor db = empty_placeholder(grad_output.options());
  if (mask[0])
    dx = at::empty_symint(output_shape(grad_output, weight_shape.back()), grad_output.options());
  if (mask[1]) dw = at::empty_symint(weight_shape, grad_output.options().dtype(weight_dtype));
  if (mask[2])
    db = at::empty_symint(weight_shape.slice(0, weight_shape.size() - 1), grad_output.options());
  return {dx, dw, db};
}

// The FP8 backward kernel takes concrete sizes; the schema's SymInt[] is
// converted here (CPU / CUDA kernels only see concrete values).
std::tuple<at::Tensor, at::Tensor, at::Tensor> fp8_backward_kernel_sym(
    const at::Tensor& grad_output, const at::Tensor& x_saved, const at::Tensor& x_scale_inv,
    const at::Tensor& w_col, const at::Tensor& w_col_scale_inv,
    const std::optional<at::Tensor>& m_splits, at::IntArrayRef recipe_codes,
    const std::optional<at::Tensor>& amax_history, const std::optional<at::Tensor>& scale,
    const std::optional<at::Tensor>& fwd_scale, c10::SymIntArrayRef weight_shape,
    at::ScalarType weight_dtype, std::array<bool, 3> mask, bool keep_input) {
  return fp8_backward_kernel(grad_output, x_saved, x_scale_inv, w_col, w_col_scale_inv, m_splits,
                             recipe_codes, amax_history, scale, fwd_scale,
                             C10_AS_INTARRAYREF_SLOW(weight_shape), weight_dtype, mask, keep_input);
}

// ---- autograd -------------------------------------------------------------------------

c10::OperatorHandle op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

struct ForwardFunction : public torch::autograd::Function<ForwardFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& inp, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias,
                            const std::optional<at::Tensor>& m_splits) {
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto handle = op("grouped_linear::forward")
                                   .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                                     const std::optional<at::Tensor>&,
                                                     const std::optional<at::Tensor>&)>();
    at::Tensor y = handle.call(inp, weight, bias, m_splits);
    ctx->save_for_backward({inp, weight});
    if (m_splits.has_value()) ctx->saved_data["m_splits"] = *m_splits;
    ctx->saved_data["has_bias"] = bias.has_value();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    std::optional<at::Tensor> m_splits;
    auto it = ctx->saved_data.find("m_splits");
    if (it != ctx->saved_data.end()) m_splits = it->second.toTensor();
    const std::array<bool, 3> mask = {
        ctx->needs_input_grad(0), ctx->needs_input_grad(1),
        ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)};
    static const auto handle = op("grouped_linear::backward")
                                   .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                                       const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                       const std::optional<at::Tensor>&, std::array<bool, 3>)>();
    auto [dx, dw, db] = handle.call(grad_outputs[0], saved[0], saved[1], m_splits, mask);
    return {mask[0] ? dx : at::Tensor(), mask[1] ? dw : at::Tensor(), mask[2] ? db : at::Tensor(),
            at::Tensor()};
  }
};

at::Tensor forward_autograd(const at::Tensor& inp, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias,
                            const std::optional<at::Tensor>& m_splits) {
  return ForwardFunction::apply(inp, weight, bias, m_splits);
}

using Fp8ForwardSig = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
    const std::optional<at::Tensor>&, at::IntArrayRef, const std::optional<at::Tensor>&,
    const std::optional<at::Tensor>&, int64_t, bool, bool, bool);

using Fp8BackwardSig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
    const std::optional<at::Tensor>&, at::IntArrayRef, const std::optional<at::Tensor>&,
    const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, c10::SymIntArrayRef,
    at::ScalarType, std::array<bool, 3>, bool);

struct Fp8Function : public torch::autograd::Function<Fp8Function> {
  // The backward set of delayed scaling (grad_output's history and scale)
  // travels as `bwd_state`: [history, scale], not differentiated.
  static variable_list forward(
      AutogradContext* ctx, const at::Tensor& inp, const at::Tensor& weight,
      const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& m_splits,
      std::vector<int64_t> recipe, const std::optional<at::Tensor>& amax_history,
      const std::optional<at::Tensor>& scale, const std::optional<at::Tensor>& bwd_history,
      const std::optional<at::Tensor>& bwd_scale, int64_t state_handle, bool save_original_input) {
    const bool input_grad = inp.requires_grad();
    const bool weight_grad = weight.requires_grad();
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> out;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      static const auto handle = op("grouped_linear::fp8_forward").typed<Fp8ForwardSig>();
      out = handle.call(inp, weight, bias, m_splits, recipe, amax_history, scale, state_handle,
                        input_grad, weight_grad, save_original_input);
    }
    const bool keep_input = save_original_input && weight_grad;
    ctx->save_for_backward({keep_input ? inp : std::get<1>(out), std::get<2>(out), std::get<3>(out),
                            std::get<4>(out)});
    if (m_splits.has_value()) ctx->saved_data["m_splits"] = *m_splits;
    if (bwd_history.has_value()) ctx->saved_data["bwd_history"] = *bwd_history;
    if (bwd_scale.has_value()) ctx->saved_data["bwd_scale"] = *bwd_scale;
    if (scale.has_value()) ctx->saved_data["fwd_scale"] = *scale;
    ctx->saved_data["recipe"] = recipe;
    ctx->saved_data["weight_shape"] = weight.sym_sizes().vec();
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    ctx->saved_data["has_bias"] = bias.has_value();
    ctx->saved_data["keep_input"] = keep_input;
    return {std::get<0>(out)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const auto optional = [&](const char* key) -> std::optional<at::Tensor> {
      auto it = ctx->saved_data.find(key);
      if (it == ctx->saved_data.end()) return std::nullopt;
      return it->second.toTensor();
    };
    const std::array<bool, 3> mask = {
        ctx->needs_input_grad(0), ctx->needs_input_grad(1),
        ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)};
    const std::vector<int64_t> recipe = ctx->saved_data["recipe"].toIntVector();
    const std::vector<c10::SymInt> weight_shape = ctx->saved_data["weight_shape"].toSymIntVector();
    static const auto handle = op("grouped_linear::fp8_backward").typed<Fp8BackwardSig>();
    auto [dx, dw, db] = handle.call(
        grad_outputs[0], saved[0], saved[1], saved[2], saved[3], optional("m_splits"), recipe,
        optional("bwd_history"), optional("bwd_scale"), optional("fwd_scale"), weight_shape,
        static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt()), mask,
        ctx->saved_data["keep_input"].toBool());
    variable_list grads(11);
    if (mask[0]) grads[0] = dx;
    if (mask[1]) grads[1] = dw;
    if (mask[2]) grads[2] = db;
    return grads;
  }
};

}  // namespace

int64_t fp8_state_handle(const std::shared_ptr<Fp8ModuleState>& state) {
  std::lock_guard<std::mutex> lock(g_handles_mutex);
  for (size_t i = 0; i < g_handles.size(); ++i)
    if (g_handles[i].lock() == state) return static_cast<int64_t>(i);
  g_handles.push_back(state);
  return static_cast<int64_t>(g_handles.size() - 1);
}

namespace {

// Called once while dynamo traces an FP8 forward (an assume_constant_result
// function in _compile.py): makes the state's buffers fit the recipe and
// device, as an eager forward would, so that the graph can take them as
// inputs; returns the handle the forward op registers the state with.
int64_t prepare_compile(const std::shared_ptr<Fp8ModuleState>& state,
                        const std::vector<int64_t>& recipe, const std::string& device) {
  GL_CHECK_VALUE(state != nullptr, "fp8_state: expected a grouped_linear._C.fp8.ModuleState");
  state->begin_forward(recipe_from_ints(recipe), at::Device(device));
  return fp8_state_handle(state);
}

}  // namespace

void register_compile_support(pybind11::module_& m) {
  m.def("_compile_prepare_fp8", guarded(&prepare_compile), pybind11::arg("fp8_state"),
        pybind11::arg("recipe"), pybind11::arg("device"),
        "torch.compile support: readies a module's FP8 state for a traced forward; returns the "
        "state's handle for grouped_linear::fp8_forward.");
  m.def("_compile_recipe_codes", guarded(&recipe_ints), pybind11::arg("recipe"),
        "torch.compile support: the recipe as the int[] the FP8 ops take.");
}

}  // namespace grouped_linear::torch_binding

namespace {

using namespace grouped_linear::torch_binding;

// The differentiable FP8 entry point: fp8_forward's autograd (it has outputs
// for backward that are not differentiable, and the backward set of delayed
// scaling as extra arguments).
at::Tensor fp8_linear_autograd(const at::Tensor& inp, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias,
                               const std::optional<at::Tensor>& m_splits, at::IntArrayRef recipe,
                               const std::optional<at::Tensor>& amax_history,
                               const std::optional<at::Tensor>& scale,
                               const std::optional<at::Tensor>& bwd_history,
                               const std::optional<at::Tensor>& bwd_scale, int64_t state_handle,
                               bool save_original_input) {
  return Fp8Function::apply(inp, weight, bias, m_splits, recipe.vec(), amax_history, scale,
                            bwd_history, bwd_scale, state_handle, save_original_input)[0];
}

}  // namespace

TORCH_LIBRARY(grouped_linear, m) {
  m.def("forward(Tensor inp, Tensor weight, Tensor? bias, Tensor? m_splits) -> Tensor");
  m.def(
      "backward(Tensor grad_output, Tensor inp, Tensor weight, Tensor? m_splits, "
      "bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  m.def(
      "fp8_forward(Tensor inp, Tensor weight, Tensor? bias, Tensor? m_splits, int[] recipe, "
      "Tensor(a!)? amax_history, Tensor? scale, int state_handle, bool input_grad, "
      "bool weight_grad, bool save_original_input) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "fp8_backward(Tensor grad_output, Tensor x_saved, Tensor x_scale_inv, Tensor w_col, "
      "Tensor w_col_scale_inv, Tensor? m_splits, int[] recipe, Tensor(a!)? amax_history, "
      "Tensor? scale, Tensor? fwd_scale, SymInt[] weight_shape, ScalarType weight_dtype, "
      "bool[3] output_mask, bool keep_input) -> (Tensor, Tensor, Tensor)");
  // Differentiable FP8 linear: fp8_forward + fp8_backward under one autograd
  // node.
  m.def(
      "fp8_linear(Tensor inp, Tensor weight, Tensor? bias, Tensor? m_splits, int[] recipe, "
      "Tensor(a!)? amax_history, Tensor? scale, Tensor? bwd_amax_history, Tensor? bwd_scale, "
      "int state_handle, bool save_original_input) -> Tensor");
}

TORCH_LIBRARY_IMPL(grouped_linear, CPU, m) {
  m.impl("forward", &forward_kernel);
  m.impl("backward", &backward_kernel);
  m.impl("fp8_forward", &fp8_forward_kernel);
  m.impl("fp8_backward", &fp8_backward_kernel_sym);
}

TORCH_LIBRARY_IMPL(grouped_linear, CUDA, m) {
  m.impl("forward", &forward_kernel);
  m.impl("backward", &backward_kernel);
  m.impl("fp8_forward", &fp8_forward_kernel);
  m.impl("fp8_backward", &fp8_backward_kernel_sym);
}

TORCH_LIBRARY_IMPL(grouped_linear, Meta, m) {
  m.impl("forward", &forward_meta);
  m.impl("backward", &backward_meta);
  m.impl("fp8_forward", &fp8_forward_meta);
  m.impl("fp8_backward", &fp8_backward_meta);
}

TORCH_LIBRARY_IMPL(grouped_linear, Autograd, m) { m.impl("forward", &forward_autograd); }

TORCH_LIBRARY_IMPL(grouped_linear, CompositeImplicitAutograd, m) {
  m.impl("fp8_linear", &fp8_linear_autograd);
}
