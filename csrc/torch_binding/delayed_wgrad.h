// delay_wgrad_compute (Transformer Engine's option): backward computes the
// input gradient only and stashes what the weight and bias gradients need;
// backward_dw() computes them later, e.g. where a zero-bubble pipeline
// schedule would otherwise idle.
//
// A module owns one WgradStore (through its LinearConfig); each backward that
// needs a weight or bias gradient pushes one entry, and each backward_dw()
// runs the oldest one, as TE's WeightGradStore queue does. The entry is a
// closure over the tensors it needs (bf16: dY and X; FP8: their column-wise
// 1-byte copies with scale_inv, and the bias gradient already summed while
// dY was quantized), so the stash costs what autograd would have saved.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace grouped_linear::torch_binding {

struct DeferredWgrad {
  // The weight's shape when the entry was made: backward_dw checks it before
  // running, so a wrong parameter is reported without losing the entry.
  std::vector<int64_t> weight_sizes;
  // (dW, db), shaped like the parameters; either undefined when not needed,
  // dW also when it went into main_grad.
  std::function<std::pair<at::Tensor, at::Tensor>()> compute;
};

// Reference-counted (intrusive_ptr): the module and every autograd node whose
// backward stashes into it hold it. The lock: backward may run on autograd's
// device threads while the caller's thread runs backward_dw.
class WgradStore : public torch::CustomClassHolder {
 public:
  void push(DeferredWgrad entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(entry));
  }
  // The oldest entry's weight shape, if any.
  std::optional<std::vector<int64_t>> front_weight_sizes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.empty()) return std::nullopt;
    return queue_.front().weight_sizes;
  }
  std::optional<DeferredWgrad> pop() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.empty()) return std::nullopt;
    DeferredWgrad entry = std::move(queue_.front());
    queue_.pop_front();
    return entry;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_.size();
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.clear();
  }

 private:
  mutable std::mutex mutex_;
  std::deque<DeferredWgrad> queue_;
};

// backward_dw: runs the oldest stashed entry and adds its gradients to
// weight.grad / bias.grad (set when undefined, as autograd's accumulation
// does), or leaves them in main_grad. Returns false, doing nothing, when
// nothing is stashed. `bias` may be undefined.
bool run_backward_dw(WgradStore& store, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace grouped_linear::torch_binding
