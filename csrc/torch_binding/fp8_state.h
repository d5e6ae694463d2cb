// A module's FP8 state, held by the module (GroupedLinear, Linear) as a C++
// object: the delayed-scaling amax histories and scales, and the quantized
// weights cached across micro-batches. And the step boundary that updates the
// scales of every state a step used.
//
// Delayed scaling keeps two tensor sets per module, laid out as
// core/fp8/delayed_scaling.h wants them ([history_len, n] histories, [n]
// scales):
//   forward   n = 1 + G: column 0 the input X, columns 1..G the weights
//             (one amax and one scale per group)
//   backward  n = 1: grad_output
// Quantize casts read the scale chosen at the last step boundary and
// max-accumulate their amax into row 0 of the history.
//
// Step boundary: when the outermost grouped_linear.autocast region of a
// thread exits, every state that ran an FP8 forward in that region is
// updated at once (scales from the histories, histories rolled), its
// forward and backward sets alike, in one update_delayed_scaling call per
// device and recipe. Transformer Engine updates the forward scales at
// autocast exit too. Backward casts run after the exit: their amaxes land in
// row 0 of the backward history and are rolled at the next boundary, so the
// backward of step k+1 uses scales that saw the gradients of step k (one
// step of delay, as for the forward).
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/fp8/quantize_ops.h"
#include "core/fp8/recipe.h"
#include "torch_binding/fp8_tensors.h"

namespace grouped_linear::torch_binding {

class Fp8ModuleState : public std::enable_shared_from_this<Fp8ModuleState> {
 public:
  Fp8ModuleState(int64_t num_groups, std::string name);

  int64_t num_groups() const { return num_groups_; }
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  // Called by an FP8 forward before any cast: makes the buffers fit the
  // recipe and the device (delayed scaling: allocated on first use or when
  // the history length changes, moved with the module) and registers the
  // state with this thread's outermost autocast region, whose exit runs the
  // step boundary (delayed scaling) and frees the state. Raises
  // RuntimeError, before anything changes, while another thread's region
  // holds the state: one module's FP8 state serves one thread at a time.
  void begin_forward(const fp8::Recipe& recipe, const at::Device& device);
  // The region that registered the state has ended (end_autocast_region).
  void end_region();
  // Registers the state with this thread's outermost autocast region without
  // a forward (no-op outside any region), so that the region's exit runs its
  // step boundary: for FP8 forwards replayed from a CUDA graph, whose casts
  // record amaxes but whose host code (begin_forward) does not run. Raises
  // as begin_forward does while another thread's region holds the state.
  void join_region();

  // Where each cast reads its scale and records its amax (delayed scaling);
  // empty for the other recipes.
  fp8::ScaleState input_state() const;
  fp8::ScaleState weight_state() const;
  fp8::ScaleState grad_output_state() const;

  bool delayed() const { return fwd_history_.defined(); }
  const fp8::Recipe& recipe() const { return recipe_; }
  bool has_recipe() const { return has_recipe_; }

  // Forward set ([H, 1 + G], [1 + G], [1 + G]) and backward set ([H, 1], [1], [1]).
  const at::Tensor& fwd_history() const { return fwd_history_; }
  const at::Tensor& fwd_scale() const { return fwd_scale_; }
  const at::Tensor& fwd_scale_inv() const { return fwd_scale_inv_; }
  const at::Tensor& bwd_history() const { return bwd_history_; }
  const at::Tensor& bwd_scale() const { return bwd_scale_; }
  const at::Tensor& bwd_scale_inv() const { return bwd_scale_inv_; }

  // Quantized weights kept across micro-batches (is_first_microbatch).
  const std::optional<Fp8Weight>& weight_cache() const { return weight_cache_; }
  void set_weight_cache(Fp8Weight weight) { weight_cache_ = std::move(weight); }
  void drop_weight_cache() { weight_cache_.reset(); }

  // Back to a fresh state (no recipe, no buffers, no cache).
  void reset();

  // Raises RuntimeError naming the module and `action` while another
  // thread's autocast region holds the state (begin_forward's rule), so that
  // a checkpoint load can be refused before torch copies any parameter.
  void check_not_held_elsewhere(const char* action);

  // The state saved in checkpoints (module `_extra_state`), one flat
  // float32 tensor so that generic state_dict tools (clone, .to, sharded
  // checkpoints) handle it and loading needs no unpickling:
  //   [version, G, H, fp8_format, margin, amax_compute_algo,
  //    fwd_history (H x (1 + G)), fwd_scale (1 + G), bwd_history (H), bwd_scale (1)]
  // H = 0 when no delayed scaling ran (the header alone). The weight cache is
  // not saved. Loading an undefined tensor (Python's None: a checkpoint
  // without FP8 state) resets.
  at::Tensor state_dict() const;
  void load_state_dict(const at::Tensor& state);

  // Tensor names in error messages: "input", "weight3", "grad_output".
  std::string tensor_name(bool forward_set, int64_t index) const;

 private:
  void allocate_delayed(int64_t history_len, const at::Device& device);
  void fail_if_held_elsewhere(const char* action) const;  // with mutex_ held
  void register_with_region();                            // with mutex_ held

  int64_t num_groups_;
  std::string name_;
  fp8::Recipe recipe_;
  bool has_recipe_ = false;
  at::Tensor fwd_history_, fwd_scale_, fwd_scale_inv_;
  at::Tensor bwd_history_, bwd_scale_, bwd_scale_inv_;
  std::optional<Fp8Weight> weight_cache_;
  // The open autocast region that holds the state (0: none), and the lock
  // that makes begin_forward and end_region see it consistently.
  uint64_t registered_region_ = 0;
  std::mutex mutex_;
};

// Activation recomputation (grouped_linear.activation_checkpoint): the
// forward it repeats in backward must cast with the scales of the forward it
// repeats and leave the state alone. A scope records, while the original
// forward runs (capturing), each delayed-scaling state's forward scales; while
// the recomputation runs (replaying), FP8 forwards cast with those scales,
// record no amax and join no autocast region.
struct RecomputeScope {
  std::vector<std::pair<std::shared_ptr<Fp8ModuleState>, at::Tensor>> scales;
  const at::Tensor* scales_of(const Fp8ModuleState* state) const;
};

// Sets this thread's capturing / replaying scope (null: none); returns the
// previous one, to be set again when the scope ends (scopes nest).
RecomputeScope* set_capturing_scope(RecomputeScope* scope);
RecomputeScope* set_replaying_scope(RecomputeScope* scope);

// The thread's outermost autocast region begins / ends (fp8_bindings.cpp
// calls these from autocast_push / autocast_pop). Ending it runs the step
// boundary for the states registered in it; with check mode on, a
// non-finite amax raises naming the module and tensor, and no scale changes.
void begin_autocast_region();
void end_autocast_region();

// Check mode for the step boundary (off by default; a debug mode: on CUDA
// it reads a flag back, a synchronisation).
void set_amax_check(bool enabled);
bool amax_check();

}  // namespace grouped_linear::torch_binding
