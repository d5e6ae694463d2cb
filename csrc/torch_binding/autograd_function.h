// GroupedLinear's autograd node, in C++: a forward is one Python-to-C++ call
// and one node; backward runs dgrad and wgrad (bias gradient fused) only for
// the inputs that need them.
#pragma once

#include <ATen/ATen.h>

#include "torch_binding/delayed_wgrad.h"
#include "torch_binding/group_splits.h"

namespace grouped_linear::torch_binding {

// Module options the call needs; built once per module, copied as a struct.
struct LinearConfig {
  bool fuse_wgrad_accumulation = false;
  // FP8: keep the high-precision input for backward (and quantize it there)
  // instead of its 1-byte column-wise copy (Transformer Engine's name).
  bool save_original_input = false;
  // delay_wgrad_compute: set, backward stashes the weight and bias gradients'
  // work here for backward_dw (delayed_wgrad.h); null, backward computes them.
  c10::intrusive_ptr<WgradStore> wgrad_store;
};

struct Fp8Call;  // fp8_autograd.h

// inp [..., K]; weight [G, N, K] (or [N, K] for Linear, one group); bias
// [G, N] / [N] or undefined; main_grad like weight in float32 when
// config.fuse_wgrad_accumulation, else undefined. Returns [..., N].
// The thread's FP8 autocast state is read once: inside an enabled region the
// products run in FP8 with the module's state from `fp8` (fp8_autograd.h).
// fp8.is_first_microbatch == true also makes fused accumulation overwrite
// main_grad instead of adding to it (Transformer Engine's rule: the first
// micro-batch's gradient is the first one in the buffer).
at::Tensor grouped_linear(const at::Tensor& inp, const at::Tensor& weight, const at::Tensor& bias,
                          GroupSplits splits, const at::Tensor& main_grad,
                          const LinearConfig& config, const Fp8Call& fp8);

}  // namespace grouped_linear::torch_binding
