#include "torch_binding/autograd_function.h"

#include <torch/csrc/autograd/custom_function.h>

#include "core/error.h"
#include "core/fp8/autocast_state.h"
#include "torch_binding/fp8_autograd.h"
#include "torch_binding/grouped_ops.h"

namespace grouped_linear::torch_binding {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The output is allocated in the input's leading shape and the engine writes
// a 2-D view of it, so the autograd output is a plain tensor (in-place ops on
// it work) rather than a view.
at::Tensor forward_into_input_shape(const at::Tensor& inp, const at::Tensor& x, const at::Tensor& w,
                                    const at::Tensor& bias, const GroupSplits& splits) {
  std::vector<int64_t> shape(inp.sizes().begin(), inp.sizes().end());
  shape.back() = w.size(1);
  at::Tensor y = at::empty(shape, x.options());
  grouped_forward(x, w, bias, splits, y.view({x.size(0), w.size(1)}));
  return y;
}

// What backward needs besides X and W, as one C++ value in one saved_data
// entry (a capsule) rather than a dictionary of boxed values, which cost
// microseconds of host time per call.
struct BackwardState : public torch::CustomClassHolder {
  GroupSplits splits;
  std::vector<int64_t> inp_sizes;
  bool fuse_wgrad = false, overwrite_main_grad = false, has_bias = false;
  at::Tensor main_grad;  // defined: fused accumulation into it
  c10::intrusive_ptr<WgradStore> wgrad_store;
};

constexpr const char* kBackwardStateKey = "state";

struct GroupedLinearFunction : public torch::autograd::Function<GroupedLinearFunction> {
  // Optional tensors travel as std::optional: torch's C++ Function records
  // every at::Tensor argument as an input and cannot take an undefined one.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& inp, const at::Tensor& weight,
                            const std::optional<at::Tensor>& optional_bias,
                            const std::optional<at::Tensor>& main_grad, const GroupSplits& splits,
                            const LinearConfig& config, bool overwrite_main_grad) {
    const at::Tensor bias = optional_bias.has_value() ? *optional_bias : at::Tensor();
    const at::Tensor w = as_grouped_weight(weight);
    const at::Tensor x = as_rows(inp, w.size(2), "inp", "in_features");
    const at::Tensor y = forward_into_input_shape(inp, x, w, as_grouped_bias(bias), splits);

    ctx->save_for_backward({x, weight});
    auto b = c10::make_intrusive<BackwardState>();
    b->splits = splits;
    b->inp_sizes = inp.sizes().vec();
    b->fuse_wgrad = config.fuse_wgrad_accumulation;
    if (config.fuse_wgrad_accumulation && main_grad.has_value()) b->main_grad = *main_grad;
    b->overwrite_main_grad = overwrite_main_grad;
    b->has_bias = bias.defined();
    b->wgrad_store = config.wgrad_store;
    ctx->saved_data[kBackwardStateKey] =
        c10::IValue::make_capsule(c10::intrusive_ptr<torch::CustomClassHolder>(std::move(b)));
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor w = as_grouped_weight(weight);
    const int64_t n = w.size(1);
    // Only forward above makes this capsule, so the downcast is safe.
    const BackwardState& b =
        *static_cast<const BackwardState*>(ctx->saved_data[kBackwardStateKey].toCapsule().get());
    const GroupSplits& splits = b.splits;

    const at::Tensor dy = as_rows(grad_outputs[0], n, "grad_output", "out_features");
    at::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) {
      dx = grouped_dgrad(dy, w, splits).view(b.inp_sizes);
    }

    const bool fuse = b.fuse_wgrad;
    WgradRequest request;
    request.weight_grad = ctx->needs_input_grad(1);
    request.bias_grad = b.has_bias && ctx->needs_input_grad(2);
    if (request.weight_grad && fuse && b.main_grad.defined()) {
      // Written, not added to, on the first micro-batch.
      request.accumulate = !b.overwrite_main_grad;
      request.grad_weight = as_grouped_weight(b.main_grad);
    }
    if (request.weight_grad || request.bias_grad) {
      const std::vector<int64_t> weight_sizes = weight.sizes().vec();
      // With fused accumulation the gradient went into main_grad; .grad stays
      // unset, as Megatron-style optimizers expect.
      const bool return_dw = request.weight_grad && !fuse;
      auto compute = [dy, x, splits, request, weight_sizes, n, return_dw]() {
        auto grads = grouped_wgrad(dy, x, splits, request);
        at::Tensor dw_out, db_out;
        if (return_dw) dw_out = grads.first.view(weight_sizes);
        if (request.bias_grad)
          db_out = weight_sizes.size() == 2 ? grads.second.view({n}) : grads.second;
        return std::make_pair(dw_out, db_out);
      };
      if (b.wgrad_store) {
        // delay_wgrad_compute: dY and X live on in the stash until backward_dw.
        b.wgrad_store->push(DeferredWgrad{weight_sizes, compute});
      } else {
        std::tie(dw, db) = compute();
      }
    }
    return {dx, dw, db, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

void check_main_grad(const at::Tensor& main_grad, const at::Tensor& weight) {
  GL_CHECK_VALUE(main_grad.defined(),
                 "fuse_wgrad_accumulation=True needs weight.main_grad: a float32 tensor shaped "
                 "like weight; set it before the forward");
  GL_CHECK_VALUE(main_grad.sizes() == weight.sizes(), "main_grad: shape ", main_grad.sizes(),
                 " does not match weight's ", weight.sizes());
  GL_CHECK_TYPE(main_grad.scalar_type() == at::kFloat, "main_grad: dtype ",
                c10::toString(main_grad.scalar_type()), " is not supported; expected float32");
  GL_CHECK_VALUE(main_grad.device() == weight.device(), "main_grad is on ",
                 main_grad.device().str(), " but weight is on ", weight.device().str(),
                 "; expected the same device");
  GL_CHECK_VALUE(main_grad.is_contiguous(), "main_grad: expected a contiguous tensor");
}

}  // namespace

at::Tensor grouped_linear(const at::Tensor& inp, const at::Tensor& weight, const at::Tensor& bias,
                          GroupSplits splits, const at::Tensor& main_grad,
                          const LinearConfig& config, const Fp8Call& fp8) {
  // Grad mode is read once; without a graph to build, skip the autograd node.
  const bool needs_graph =
      at::GradMode::is_enabled() &&
      (inp.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  if (needs_graph && config.fuse_wgrad_accumulation && weight.requires_grad())
    check_main_grad(main_grad, weight);
  // The autocast state is read once per call: one branch for the bf16 path.
  const fp8::AutocastState& autocast = fp8::current();
  if (autocast.enabled)
    return fp8_grouped_linear(inp, weight, bias, std::move(splits), main_grad, config,
                              autocast.recipe, fp8, needs_graph);
  if (!needs_graph) {
    const at::Tensor w = as_grouped_weight(weight);
    const at::Tensor x = as_rows(inp, w.size(2), "inp", "in_features");
    return forward_into_input_shape(inp, x, w, as_grouped_bias(bias), splits);
  }
  const auto optional = [](const at::Tensor& t) {
    return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
  };
  const bool overwrite_main_grad = fp8.is_first_microbatch.value_or(false);
  return GroupedLinearFunction::apply(inp, weight, optional(bias), optional(main_grad), splits,
                                      config, overwrite_main_grad);
}

namespace {

void add_to_grad(const at::Tensor& param, const at::Tensor& grad, const char* name) {
  at::Tensor& current = param.mutable_grad();
  if (!current.defined()) {
    // Freshly allocated by the wgrad: no copy needed, unless the forward ran
    // in another dtype than the parameter's (torch.autocast).
    current = grad.scalar_type() == param.scalar_type() ? grad : grad.to(param.scalar_type());
    return;
  }
  GL_CHECK_VALUE(current.sizes() == grad.sizes(), name, ".grad: shape ", current.sizes(),
                 " does not match the gradient's ", grad.sizes());
  current.add_(grad);
}

}  // namespace

bool run_backward_dw(WgradStore& store, const at::Tensor& weight, const at::Tensor& bias) {
  const auto sizes = store.front_weight_sizes();
  if (!sizes.has_value()) return false;  // nothing stashed: a no-op, as in TE
  GL_CHECK_VALUE(weight.sizes() == at::IntArrayRef(*sizes), "weight: shape ", weight.sizes(),
                 " is not the shape ", at::IntArrayRef(*sizes),
                 " of the weight whose backward stashed this gradient");
  // Popped before running, so an entry that fails cannot block the queue.
  DeferredWgrad entry = *store.pop();
  at::NoGradGuard no_grad;
  auto [dw, db] = entry.compute();
  if (dw.defined()) add_to_grad(weight, dw, "weight");
  if (db.defined() && bias.defined()) add_to_grad(bias, db, "bias");
  return true;
}

}  // namespace grouped_linear::torch_binding
