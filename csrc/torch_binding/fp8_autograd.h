// GroupedLinear / Linear under grouped_linear.autocast: the FP8 forward and
// its C++ autograd node.
//
// Forward: X quantized row-wise (and column-wise when the weight needs a
// gradient, in the same pass), W row-wise (and column-wise when the input
// needs a gradient) or taken from the module's cache (is_first_microbatch),
// then fp8::run_fp8_forward on the device's engine. Saved for backward: the
// column-wise X codes (1 byte per element) and their scale_inv, the
// column-wise W codes and theirs; not the high-precision input, unless
// save_original_input (then X is quantized in backward).
// Backward: dY quantized once with the gradient format into the row-wise
// (dgrad) and column-wise (wgrad) copies, the bias gradient summed in the
// same pass; then run_fp8_dgrad and run_fp8_wgrad (into main_grad with
// fuse_wgrad_accumulation).
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>

#include "core/fp8/quantize_ops.h"
#include "core/fp8/recipe.h"
#include "torch_binding/autograd_function.h"
#include "torch_binding/fp8_tensors.h"
#include "torch_binding/group_splits.h"

namespace grouped_linear::torch_binding {

class Fp8ModuleState;

// What a module passes for FP8 besides its tensors.
struct Fp8Call {
  std::shared_ptr<Fp8ModuleState> state;    // the module's; required under FP8 autocast
  std::optional<bool> is_first_microbatch;  // None: quantize W every call; True: quantize
                                            // and cache; False: reuse the cache
};

// The FP8 path of grouped_linear() (autograd_function.h), with the recipe
// read from the autocast state once by the caller. `needs_graph` as there.
at::Tensor fp8_grouped_linear(const at::Tensor& inp, const at::Tensor& weight,
                              const at::Tensor& bias, GroupSplits splits,
                              const at::Tensor& main_grad, const LinearConfig& config,
                              const fp8::Recipe& recipe, const Fp8Call& call, bool needs_graph);

// The checks on X [T, K], the grouped weight [G, N, K] and the grouped bias
// [G, N] (or undefined) that every FP8 forward makes before its first cast:
// dtypes, devices, the bias' dtype and shape. Shared with the dispatcher op.
void check_fp8_operands(const at::Tensor& inp, const at::Tensor& w, const at::Tensor& bias);

// Steps of the FP8 backward, shared by the autograd node above and the
// backward of the dispatcher op (op_registration.cpp).

// dY [T, N] cast with the recipe's gradient format into the row-wise
// (dgrad) and column-wise (wgrad) copies asked for, the bias gradient summed
// into grad_bias (when defined) in the same pass. With neither copy asked
// for, only the bias gradient: plain column sums, no cast. `lifetimes`:
// whether the two copies may share an allocation (not when a deferred wgrad
// keeps the column-wise one past the row-wise one).
Fp8Activation quantize_grad_output(const at::Tensor& dy, const GroupSplits& splits,
                                   const fp8::Recipe& recipe, bool rowwise, bool columnwise,
                                   const fp8::ScaleState& state, const at::Tensor& grad_bias,
                                   CopyLifetimes lifetimes);

// dX [T, K] (dY's dtype) = dY_g W_g per group, from dY's row-wise copy dyq
// and the weights' column-wise codes (w_col [G, K, N]) and their scale_inv.
at::Tensor fp8_dgrad_rows(const at::Tensor& dy, const Fp8Activation& dyq, const GroupSplits& splits,
                          const at::Tensor& w_col, const at::Tensor& w_col_scale_inv,
                          const fp8::Recipe& recipe, int64_t k);

// X's column-wise copy for wgrad: with save_original_input (keep_input) the
// saved rows x [T, K] cast now with `state`; otherwise the saved codes x
// [K, P] and their scale_inv.
Fp8Activation input_for_wgrad(const at::Tensor& x, const at::Tensor& x_scale_inv, bool keep_input,
                              const GroupSplits& splits, const fp8::Recipe& recipe, int64_t t,
                              int64_t k, const fp8::ScaleState& state);

}  // namespace grouped_linear::torch_binding
