// The three products on torch tensors: checks, output allocation through
// torch's caching allocator, device guard, then one call into the core engine.
// The autograd function and the raw `ops` bindings both use these.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <utility>

#include "torch_binding/group_splits.h"

namespace grouped_linear::torch_binding {

// y[T, N] = grouped x[T, K] · w[G, N, K]ᵀ (+ bias[G, N]).
at::Tensor grouped_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           const GroupSplits& splits, const std::optional<at::Tensor>& out = {},
                           const std::string& engine = "");

// dx[T, K] = grouped dy[T, N] · w[G, N, K].
at::Tensor grouped_dgrad(const at::Tensor& dy, const at::Tensor& weight, const GroupSplits& splits,
                         const std::optional<at::Tensor>& out = {}, const std::string& engine = "");

struct WgradRequest {
  bool weight_grad = true;
  bool bias_grad = false;
  bool accumulate = false;  // add into grad_weight (main_grad) instead of writing it
  at::Tensor grad_weight;   // [G, N, K]; allocated when undefined and not accumulating
  at::Tensor grad_bias;     // [G, N]; allocated when undefined
  std::string engine;
};

// dw[G, N, K] = grouped dyᵀ · x, db[G, N] = Σ_rows dy; returns (dw, db), each
// undefined when not asked for.
std::pair<at::Tensor, at::Tensor> grouped_wgrad(const at::Tensor& dy, const at::Tensor& x,
                                                const GroupSplits& splits,
                                                const WgradRequest& request);

// Inputs as the core wants them: 2-D, unit stride along the row. `cols_name`
// names the expected last dimension in errors ("in_features").
at::Tensor as_rows(const at::Tensor& t, int64_t cols, const char* arg_name, const char* cols_name);

// Linear's [N, K] weight and [N] bias are the one-group case of [G, N, K]
// and [G, N].
inline at::Tensor as_grouped_weight(const at::Tensor& weight) {
  return weight.dim() == 2 ? weight.unsqueeze(0) : weight;
}
inline at::Tensor as_grouped_bias(const at::Tensor& bias) {
  return bias.defined() && bias.dim() == 1 ? bias.unsqueeze(0) : bias;
}

}  // namespace grouped_linear::torch_binding
