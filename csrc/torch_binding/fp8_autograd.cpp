#include "torch_binding/fp8_autograd.h"

#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include <functional>
#include <vector>

#include "core/engine_registry.h"
#include "core/error.h"
#include "core/fp8/fp8_gemm.h"
#include "torch_binding/exec_context.h"
#include "torch_binding/fp8_state.h"
#include "torch_binding/fp8_tensors.h"
#include "torch_binding/grouped_ops.h"
#include "torch_binding/tensor_views.h"

namespace grouped_linear::torch_binding {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool high_precision(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

void check_dtype(const at::Tensor& t, const char* name) {
  GL_CHECK_TYPE(high_precision(t.scalar_type()), name, ": dtype ", c10::toString(t.scalar_type()),
                " is not supported under FP8 autocast; expected float32, float16 or bfloat16");
}

void check_device(const at::Tensor& t, const char* name, const at::Tensor& ref,
                  const char* ref_name) {
  GL_CHECK_VALUE(t.device() == ref.device(), name, " is on ", t.device().str(), " but ", ref_name,
                 " is on ", ref.device().str(), "; expected the same device");
}

// Everything an FP8 call can get wrong is checked before the first cast, so a
// bad call records no amax and leaves the module's state as it was.
void check_inputs(const at::Tensor& inp, const at::Tensor& w, const at::Tensor& bias,
                  const GroupSplits& splits, const Fp8Call& call) {
  GL_CHECK_VALUE(call.state != nullptr,
                 "fp8_state: FP8 autocast is on but no module FP8 state was passed; call through "
                 "GroupedLinear / Linear, or pass a grouped_linear._C.fp8.ModuleState");
  GL_CHECK_VALUE(call.state->num_groups() == w.size(0), "fp8_state: made for ",
                 call.state->num_groups(), " groups, but weight has ", w.size(0));
  check_fp8_operands(inp, w, bias);
  check_split_count(splits, w.size(0));
}

fp8::ScaleState scale_state(const at::Tensor& scale, const at::Tensor& history) {
  fp8::ScaleState s;
  if (scale.defined()) s.scale = scale.data_ptr<float>();
  if (history.defined()) s.amax = history.data_ptr<float>();
  return s;
}

// ---- forward ------------------------------------------------------------------------

// The cached FP8 weight, when is_first_microbatch is False and the cache
// holds the copies this forward needs; else none.
const Fp8Weight* cached_weight(const Fp8ModuleState& state, const at::Tensor& w, bool columnwise,
                               const std::optional<bool>& first) {
  if (!first.has_value() || *first || !state.weight_cache().has_value()) return nullptr;
  const Fp8Weight& cache = *state.weight_cache();
  if (cache.row.defined() && (!columnwise || cache.col.defined()) &&
      cache.row.device() == w.device() && cache.row.sizes() == w.sizes())
    return &cache;
  return nullptr;
}

struct Fp8Forward {
  at::Tensor y;
  Fp8Activation x;  // the column-wise copy, when asked for
  Fp8Weight w;      // with the column-wise copy, when asked for
};

Fp8Forward run_forward(const at::Tensor& inp, const at::Tensor& x, const at::Tensor& w,
                       const at::Tensor& bias, const GroupSplits& splits, const fp8::Recipe& recipe,
                       Fp8ModuleState& state, const std::optional<bool>& first, bool x_columnwise,
                       bool w_columnwise, bool wgrad_deferred) {
  if (!splits.device.defined())
    validate_group_sizes(splits.host.data(), splits.num_groups, x.size(0));
  state.begin_forward(recipe, x.device());
  const QuantizeSpec spec = forward_spec(recipe);
  Fp8Forward out;
  if (const Fp8Weight* cache = cached_weight(state, w, w_columnwise, first)) {
    out.x =
        quantize_activation(x, splits, spec, /*rowwise=*/true, x_columnwise, state.input_state());
    out.w = *cache;
  } else {
    // X and W in one quantize operation; the fresh weight is cached when
    // is_first_microbatch is given, and None drops any cache. Copies that
    // die together share an allocation.
    const ForwardLifetimes lifetimes = first.has_value() ? ForwardLifetimes::kWeightKept
                                       : wgrad_deferred  ? ForwardLifetimes::kSavedApart
                                                         : ForwardLifetimes::kSavedTogether;
    std::tie(out.x, out.w) =
        quantize_forward_operands(x, splits, x_columnwise, state.input_state(), w, w_columnwise,
                                  state.weight_state(), spec, lifetimes);
    if (first.has_value())
      state.set_weight_cache(out.w);
    else
      state.drop_weight_cache();
  }

  std::vector<int64_t> shape(inp.sizes().begin(), inp.sizes().end());
  shape.back() = w.size(1);
  out.y = at::empty(shape, x.options());
  const at::Tensor y2d = out.y.view({x.size(0), w.size(1)});

  c10::OptionalDeviceGuard guard(x.device());
  fp8::ForwardProblem problem;
  problem.x = out.x.view();
  problem.w = out.w.view();
  problem.bias = bias_view(bias, "bias");
  problem.y = matrix_view(y2d, "out");
  problem.splits = splits.view();
  problem.split_accumulator = recipe.fprop_split_accumulator;
  const Device device = to_core_device(x.device());
  fp8::run_fp8_forward(engine_for(device), problem, exec_context(x.device()));
  // Only the column-wise copies live on (for backward).
  out.x.row = out.x.row_scale_inv = at::Tensor();
  return out;
}

// ---- the autograd node ---------------------------------------------------------------

enum Saved { kX = 0, kXScaleInv, kW, kWScaleInv, kSavedCount };

// What backward needs besides the saved tensors, as one C++ value in one
// saved_data entry (a capsule): a per-call dictionary of a dozen IValues
// (string keys, boxed vectors) cost several microseconds of host time each
// way. The state's buffers are shared, not copied: backward records dY's
// amax into the backward history, and with save_original_input casts X with
// the input's scale as it is then.
struct Fp8BackwardState : public torch::CustomClassHolder {
  GroupSplits splits;
  std::vector<int64_t> inp_sizes, weight_sizes;
  at::ScalarType weight_dtype = at::kFloat;
  int64_t groups = 0, n = 0, k = 0, t = 0;
  fp8::Recipe recipe;
  bool keep_input = false, fuse_wgrad = false, overwrite_main_grad = false, has_bias = false;
  at::Tensor main_grad;  // defined: fused accumulation into it
  c10::intrusive_ptr<WgradStore> wgrad_store;
  bool delayed = false;
  at::Tensor bwd_scale, bwd_history, fwd_scale;
};

constexpr const char* kBackwardStateKey = "fp8";

struct Fp8GroupedLinearFunction : public torch::autograd::Function<Fp8GroupedLinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& inp, const at::Tensor& weight,
                            const std::optional<at::Tensor>& optional_bias,
                            const std::optional<at::Tensor>& main_grad, const GroupSplits& splits,
                            const LinearConfig& config, const fp8::Recipe& recipe,
                            const Fp8Call& call) {
    const at::Tensor bias = optional_bias.has_value() ? *optional_bias : at::Tensor();
    const at::Tensor w = as_grouped_weight(weight);
    const at::Tensor x = as_rows(inp, w.size(2), "inp", "in_features");
    const bool weight_grad = weight.requires_grad();
    const bool input_grad = inp.requires_grad();
    const bool keep_input = config.save_original_input;
    Fp8ModuleState& state = *call.state;
    Fp8Forward f = run_forward(inp, x, w, as_grouped_bias(bias), splits, recipe, state,
                               call.is_first_microbatch, weight_grad && !keep_input, input_grad,
                               /*wgrad_deferred=*/static_cast<bool>(config.wgrad_store));

    std::vector<at::Tensor> saved(kSavedCount);
    if (weight_grad) {
      if (keep_input) {
        saved[kX] = x;
      } else {
        saved[kX] = f.x.col;
        saved[kXScaleInv] = f.x.col_scale_inv;
      }
    }
    if (input_grad) {
      saved[kW] = f.w.col;
      saved[kWScaleInv] = f.w.col_scale_inv;
    }
    ctx->save_for_backward(saved);

    auto b = c10::make_intrusive<Fp8BackwardState>();
    b->splits = splits;
    b->inp_sizes = inp.sizes().vec();
    b->weight_sizes = weight.sizes().vec();
    b->weight_dtype = weight.scalar_type();
    b->groups = w.size(0);
    b->n = w.size(1);
    b->k = w.size(2);
    b->t = x.size(0);
    b->recipe = recipe;
    b->keep_input = keep_input;
    b->fuse_wgrad = config.fuse_wgrad_accumulation;
    if (config.fuse_wgrad_accumulation && main_grad.has_value()) b->main_grad = *main_grad;
    b->overwrite_main_grad = call.is_first_microbatch.value_or(false);
    b->has_bias = bias.defined();
    b->wgrad_store = config.wgrad_store;
    if (state.delayed() && recipe.kind == fp8::RecipeKind::kDelayed) {
      b->delayed = true;
      b->bwd_scale = state.bwd_scale();
      b->bwd_history = state.bwd_history();
      b->fwd_scale = state.fwd_scale();
    }
    ctx->saved_data[kBackwardStateKey] =
        c10::IValue::make_capsule(c10::intrusive_ptr<torch::CustomClassHolder>(std::move(b)));
    return f.y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    // Only forward above makes this capsule, so the downcast is safe.
    const Fp8BackwardState& b =
        *static_cast<const Fp8BackwardState*>(ctx->saved_data[kBackwardStateKey].toCapsule().get());
    const fp8::Recipe& recipe = b.recipe;
    const int64_t groups = b.groups, n = b.n, k = b.k, t = b.t;
    const GroupSplits& splits = b.splits;

    const at::Tensor dy = as_rows(grad_outputs[0], n, "grad_output", "out_features");
    const bool input_grad = ctx->needs_input_grad(0);
    const bool weight_grad = ctx->needs_input_grad(1);
    const bool bias_grad = b.has_bias && ctx->needs_input_grad(2);

    at::Tensor dx, dw, db;
    // The bias gradient in the bias' dtype (that of dY), summed in fp32.
    at::Tensor grad_bias = bias_grad ? at::empty({groups, n}, dy.options()) : at::Tensor();
    const fp8::ScaleState dy_state =
        b.delayed ? scale_state(b.bwd_scale, b.bwd_history) : fp8::ScaleState{};
    // dY's copies share a block unless a deferred wgrad keeps the column-wise one.
    const c10::intrusive_ptr<WgradStore>& store = b.wgrad_store;
    const Fp8Activation dyq =
        quantize_grad_output(dy, splits, recipe, input_grad, weight_grad, dy_state, grad_bias,
                             store ? CopyLifetimes::kApart : CopyLifetimes::kShared);

    if (input_grad)
      dx = fp8_dgrad_rows(dy, dyq, splits, saved[kW], saved[kWScaleInv], recipe, k)
               .view(b.inp_sizes);

    // delay_wgrad_compute: the wgrad below (and the bias gradient, already
    // summed) is stashed for backward_dw; dY's row-wise copy is not kept.
    const std::vector<int64_t>& weight_sizes = b.weight_sizes;
    std::function<at::Tensor()> compute_dw;

    if (weight_grad) {
      // save_original_input: X is cast now, with the input's scale as it is
      // now (delayed scaling; its amax was recorded in forward).
      const fp8::ScaleState x_state =
          b.delayed ? scale_state(b.fwd_scale, at::Tensor()) : fp8::ScaleState{};
      const Fp8Activation xq = input_for_wgrad(saved[kX], saved[kXScaleInv], b.keep_input, splits,
                                               recipe, t, k, x_state);
      const bool fuse = b.fuse_wgrad;
      const at::Tensor& main_grad = b.main_grad;
      const bool into_main_grad = fuse && main_grad.defined();
      // Written, not added to, on the first micro-batch (is_first_microbatch).
      const bool accumulate = into_main_grad && !b.overwrite_main_grad;
      const at::ScalarType weight_dtype = b.weight_dtype;
      Fp8Activation dy_col = dyq;  // only the column-wise copy is needed from here on
      dy_col.row = dy_col.row_scale_inv = at::Tensor();
      const bool split_accumulator = recipe.wgrad_split_accumulator;
      compute_dw = [dy_col, xq, main_grad, into_main_grad, accumulate, weight_dtype, splits, groups,
                    n, k, t, fuse, weight_sizes, split_accumulator]() {
        const at::Device device = dy_col.col.device();
        c10::OptionalDeviceGuard guard(device);
        const at::Tensor target =
            into_main_grad ? main_grad.view({groups, n, k})
                           : at::empty({groups, n, k}, dy_col.col.options().dtype(weight_dtype));
        fp8::WgradProblem problem;
        problem.dy = dy_col.view();
        problem.x = xq.view();
        problem.dw = grouped_view(target, into_main_grad ? "main_grad" : "grad_weight");
        problem.accumulate = accumulate;
        problem.splits = splits.view();
        problem.total_rows = t;
        problem.split_accumulator = split_accumulator;
        fp8::run_fp8_wgrad(engine_for(to_core_device(device)), problem, exec_context(device));
        // With fused accumulation the gradient went into main_grad; .grad
        // stays unset, as in the unquantized path.
        return fuse ? at::Tensor() : target.view(weight_sizes);
      };
    }

    if (bias_grad) db = weight_sizes.size() == 2 ? grad_bias.view({n}) : grad_bias;
    if (store && (weight_grad || bias_grad)) {
      store->push(DeferredWgrad{weight_sizes, [compute_dw, db]() {
                                  return std::make_pair(compute_dw ? compute_dw() : at::Tensor(),
                                                        db);
                                }});
      db = at::Tensor();
    } else if (compute_dw) {
      dw = compute_dw();
    }
    return {dx, dw, db, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

// The weight may differ from the input in dtype (a float32 parameter under
// torch.autocast): it is quantized from its own values, and the output and
// dX take the input's dtype, dW the weight's.
void check_fp8_operands(const at::Tensor& inp, const at::Tensor& w, const at::Tensor& bias) {
  check_dtype(inp, "inp");
  check_dtype(w, "weight");
  check_device(inp, "inp", w, "weight");
  GL_CHECK_VALUE(inp.device().is_cpu() || inp.device().is_cuda(), "inp: device ",
                 inp.device().str(), " is not supported; expected cpu or cuda");
  if (bias.defined()) {
    GL_CHECK_TYPE(bias.scalar_type() == inp.scalar_type(), "mixed dtypes: bias is ",
                  c10::toString(bias.scalar_type()), " but inp is ",
                  c10::toString(inp.scalar_type()), "; expected the same dtype (the output's)");
    check_device(bias, "bias", w, "weight");
    GL_CHECK_VALUE(bias.dim() == 2 && bias.size(0) == w.size(0) && bias.size(1) == w.size(1),
                   "bias: shape ", bias.sizes(), " does not match the expected [", w.size(0), ", ",
                   w.size(1), "]");
  }
}

Fp8Activation quantize_grad_output(const at::Tensor& dy, const GroupSplits& splits,
                                   const fp8::Recipe& recipe, bool rowwise, bool columnwise,
                                   const fp8::ScaleState& state, const at::Tensor& grad_bias,
                                   CopyLifetimes lifetimes) {
  if (rowwise || columnwise)
    return quantize_activation(dy, splits, backward_spec(recipe), rowwise, columnwise, state,
                               grad_bias, lifetimes);
  if (grad_bias.defined()) {
    WgradRequest request;
    request.weight_grad = false;
    request.bias_grad = true;
    request.grad_bias = grad_bias;
    grouped_wgrad(dy, at::empty({dy.size(0), 0}, dy.options()), splits, request);
  }
  return Fp8Activation{};
}

at::Tensor fp8_dgrad_rows(const at::Tensor& dy, const Fp8Activation& dyq, const GroupSplits& splits,
                          const at::Tensor& w_col, const at::Tensor& w_col_scale_inv,
                          const fp8::Recipe& recipe, int64_t k) {
  const at::Device device = dy.device();
  c10::OptionalDeviceGuard guard(device);
  Fp8Weight wq;
  wq.spec = forward_spec(recipe);
  wq.col = w_col;
  wq.col_scale_inv = w_col_scale_inv;
  at::Tensor dx = at::empty({dy.size(0), k}, dy.options());
  fp8::DgradProblem problem;
  problem.dy = dyq.view();
  problem.w = wq.view();
  problem.dx = matrix_view(dx, "grad_input");
  problem.splits = splits.view();
  problem.split_accumulator = recipe.dgrad_split_accumulator;
  fp8::run_fp8_dgrad(engine_for(to_core_device(device)), problem, exec_context(device));
  return dx;
}

Fp8Activation input_for_wgrad(const at::Tensor& x, const at::Tensor& x_scale_inv, bool keep_input,
                              const GroupSplits& splits, const fp8::Recipe& recipe, int64_t t,
                              int64_t k, const fp8::ScaleState& state) {
  if (keep_input)
    return quantize_activation(x, splits, forward_spec(recipe), /*rowwise=*/false,
                               /*columnwise=*/true, state);
  Fp8Activation xq;
  xq.spec = forward_spec(recipe);
  xq.rows = t;
  xq.cols = k;
  xq.col = x;
  xq.col_scale_inv = x_scale_inv;
  return xq;
}

at::Tensor fp8_grouped_linear(const at::Tensor& inp, const at::Tensor& weight,
                              const at::Tensor& bias, GroupSplits splits,
                              const at::Tensor& main_grad, const LinearConfig& config,
                              const fp8::Recipe& recipe, const Fp8Call& call, bool needs_graph) {
  const at::Tensor w = as_grouped_weight(weight);
  check_inputs(inp, w, as_grouped_bias(bias), splits, call);
  if (!needs_graph) {
    const at::Tensor x = as_rows(inp, w.size(2), "inp", "in_features");
    return run_forward(inp, x, w, as_grouped_bias(bias), splits, recipe, *call.state,
                       call.is_first_microbatch, false, false, false)
        .y;
  }
  const auto optional = [](const at::Tensor& t) {
    return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
  };
  return Fp8GroupedLinearFunction::apply(inp, weight, optional(bias), optional(main_grad), splits,
                                         config, recipe, call);
}

}  // namespace grouped_linear::torch_binding
