// The C++ API of grouped_linear for libtorch users: GroupedLinear (one linear
// layer per MoE expert, applied to consecutive row groups of one input) and
// Linear (its one-group case) as torch::nn modules. They run the same C++
// autograd node and engines as the Python modules, with no Python involved.
//
//   grouped_linear::GroupedLinear experts(
//       grouped_linear::GroupedLinearOptions(8, 1024, 4096).params_dtype(torch::kBFloat16));
//   torch::Tensor y = experts->forward(x, {512, 0, 1024, ...});  // or a 1-D integer tensor
//
// Bad arguments throw c10::ValueError / c10::TypeError (both c10::Error, as
// libtorch's own checks) with a message naming the argument, what came and
// what was expected; the module is unchanged and keeps working.
#pragma once

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/common.h>
#include <torch/nn/modules/container/any_module_holder.h>
#include <torch/nn/modules/container/any_value.h>
#include <torch/nn/pimpl.h>
#include <torch/ordered_dict.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "grouped_linear/fp8.h"

namespace grouped_linear {

namespace torch_binding {  // internal
class Fp8ModuleState;      // a module's FP8 state
struct LinearConfig;       // the options a call needs, with delay_wgrad_compute's queue
}  // namespace torch_binding

// Initializes one weight matrix [out_features, in_features] in place (called
// under no_grad, once per expert for GroupedLinear).
using InitMethod = std::function<void(torch::Tensor)>;

// The Python modules' arguments (Transformer Engine's names) that mean
// something in C++; return_bias is Python-only. FP8: grouped_linear/fp8.h.
struct GroupedLinearOptions {
  GroupedLinearOptions(int64_t num_gemms, int64_t in_features, int64_t out_features)
      : num_gemms_(num_gemms), in_features_(in_features), out_features_(out_features) {}

  TORCH_ARG(int64_t, num_gemms);
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, out_features);
  TORCH_ARG(bool, bias) = true;
  // float32, float16 or bfloat16; unset: torch's default dtype.
  TORCH_ARG(std::optional<torch::Dtype>, params_dtype) = std::nullopt;
  // Unset: CUDA when available, else the CPU (as the Python modules).
  TORCH_ARG(std::optional<torch::Device>, device) = std::nullopt;
  // Backward adds the weight gradient into `main_grad` (float32, shaped like
  // weight; set it before the forward) and leaves weight.grad unset.
  TORCH_ARG(bool, fuse_wgrad_accumulation) = false;
  // Unset: normal(0, 0.023), Transformer Engine's default. Biases start at 0.
  TORCH_ARG(InitMethod, init_method) = nullptr;
  // FP8: keep the high-precision input for backward (quantized there)
  // instead of its 1-byte column-wise copy.
  TORCH_ARG(bool, save_original_input) = false;
  // Backward computes the input gradient only and stashes the weight and
  // bias gradients' work for backward_dw() (Transformer Engine's option).
  TORCH_ARG(bool, delay_wgrad_compute) = false;
};

struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}

  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, out_features);
  TORCH_ARG(bool, bias) = true;
  TORCH_ARG(std::optional<torch::Dtype>, params_dtype) = std::nullopt;
  TORCH_ARG(std::optional<torch::Device>, device) = std::nullopt;
  TORCH_ARG(bool, fuse_wgrad_accumulation) = false;
  TORCH_ARG(InitMethod, init_method) = nullptr;
  TORCH_ARG(bool, save_original_input) = false;
  TORCH_ARG(bool, delay_wgrad_compute) = false;
};

// GroupedLinear's m_splits: row counts on the host (a std::vector<int64_t> or
// a braced list), or a 1-D int32/int64 tensor on the CPU or on inp's device.
// One type rather than two forward overloads: torch::nn::ModuleHolder's
// operator() and AnyModule need a single forward.
class MSplits {
 public:
  MSplits(std::vector<int64_t> counts) : counts_(std::move(counts)) {}
  MSplits(std::initializer_list<int64_t> counts) : counts_(counts) {}
  MSplits(torch::Tensor counts) : tensor_(std::move(counts)), is_tensor_(true) {}

  bool is_tensor() const { return is_tensor_; }
  const std::vector<int64_t>& counts() const { return counts_; }
  const torch::Tensor& tensor() const { return tensor_; }

 private:
  std::vector<int64_t> counts_;
  torch::Tensor tensor_;
  bool is_tensor_ = false;
};

// forward(inp [..., in_features], m_splits) -> [..., out_features]: the
// flattened rows of `inp` are split into num_gemms groups of m_splits[i] rows
// (zero allowed) and group i is multiplied by weight[i] (+ bias[i]).
//
// Parameters (named as in Python, so optimizers see two tensors): `weight`
// [G, out, in] and `bias` [G, out]. Checkpoints use the per-expert names
// `weight0` ... `weight{G-1}`, `bias0` ...: torch::save / torch::load of the
// module (or of any module holding it) write and read them through save() /
// load(), and expert_state_dict() / load_expert_state_dict() give the same
// naming as a torch::OrderedDict. save() also writes the FP8 state
// ("_extra_state"); load() reads it when present and otherwise resets it.
class GroupedLinearImpl : public torch::nn::Cloneable<GroupedLinearImpl> {
 public:
  GroupedLinearImpl(int64_t num_gemms, int64_t in_features, int64_t out_features)
      : GroupedLinearImpl(GroupedLinearOptions(num_gemms, in_features, out_features)) {}
  explicit GroupedLinearImpl(GroupedLinearOptions options);

  // (Re)creates the parameters from `options` and initializes them (not on
  // the meta device); clone() relies on it. Drops main_grad.
  void reset() override;
  // Re-initializes the existing parameters in place.
  void reset_parameters();

  // A tensor m_splits on a GPU is read on the device (no sync with the Hopper
  // engine): sizes there cannot be validated, so pass host sizes while
  // debugging. (experts->forward(x, {3, 0, 5}); operator() needs a vector.)
  // is_first_microbatch (FP8 only; Transformer Engine's): unset quantizes
  // the weights in every call; true quantizes and keeps them, false reuses
  // the kept ones (the later micro-batches of a step).
  torch::Tensor forward(const torch::Tensor& inp, const MSplits& m_splits,
                        std::optional<bool> is_first_microbatch = std::nullopt);

  // delay_wgrad_compute: computes the weight and bias gradients stashed by
  // the oldest backward not yet handled, adding them to weight.grad /
  // bias.grad (or the weight's into main_grad); true if there was one.
  // Without delay_wgrad_compute, or with nothing stashed, does nothing.
  bool backward_dw();

  // {"weight0": weight[0], ..., "bias0": bias[0], ...}: views that share the
  // parameters' storage (detached).
  torch::OrderedDict<std::string, torch::Tensor> expert_state_dict() const;
  // Accepts the per-expert names or the fused ones ("weight" [G, out, in],
  // "bias" [G, out]), converting dtype and device. Rejects missing or
  // unexpected keys, mixed naming and wrong shapes, naming the key, and then
  // changes nothing.
  void load_expert_state_dict(const torch::OrderedDict<std::string, torch::Tensor>& state);

  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  void pretty_print(std::ostream& stream) const override;

  GroupedLinearOptions options;
  torch::Tensor weight;     // [num_gemms, out_features, in_features]
  torch::Tensor bias;       // [num_gemms, out_features]; undefined without bias
  torch::Tensor main_grad;  // fuse_wgrad_accumulation only: float32, shaped like weight

 protected:
  FORWARD_HAS_DEFAULT_ARGS({2, torch::nn::AnyValue(std::optional<bool>())})

 private:
  // reset() makes fresh ones (so a clone starts without FP8 history or
  // stashed gradients).
  std::shared_ptr<torch_binding::Fp8ModuleState> fp8_state_;
  std::shared_ptr<torch_binding::LinearConfig> config_;
};
TORCH_MODULE(GroupedLinear);

// y = inp · weightᵀ + bias, the one-group case of GroupedLinear on the same
// engines. Parameters `weight` [out, in] and `bias` [out], as torch::nn::Linear.
class LinearImpl : public torch::nn::Cloneable<LinearImpl> {
 public:
  LinearImpl(int64_t in_features, int64_t out_features)
      : LinearImpl(LinearOptions(in_features, out_features)) {}
  explicit LinearImpl(LinearOptions options);

  void reset() override;
  void reset_parameters();

  torch::Tensor forward(const torch::Tensor& inp,
                        std::optional<bool> is_first_microbatch = std::nullopt);
  bool backward_dw();  // as GroupedLinear's

  // torch::nn::Module's keys ("weight", "bias") and the FP8 state
  // ("_extra_state").
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  void pretty_print(std::ostream& stream) const override;

  LinearOptions options;
  torch::Tensor weight;     // [out_features, in_features]
  torch::Tensor bias;       // [out_features]; undefined without bias
  torch::Tensor main_grad;  // fuse_wgrad_accumulation only: float32, shaped like weight

 protected:
  FORWARD_HAS_DEFAULT_ARGS({1, torch::nn::AnyValue(std::optional<bool>())})

 private:
  std::shared_ptr<torch_binding::Fp8ModuleState> fp8_state_;
  std::shared_ptr<torch_binding::LinearConfig> config_;
};
TORCH_MODULE(Linear);

}  // namespace grouped_linear
