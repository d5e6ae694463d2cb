#include "torch_binding/fp8_state.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/fp8/delayed_scaling_ops.h"
#include "torch_binding/exec_context.h"
#include "torch_binding/tensor_views.h"

namespace grouped_linear::torch_binding {
namespace {

constexpr int64_t kStateVersion = 1;
constexpr int64_t kHeader = 6;  // see Fp8ModuleState::state_dict

// Thread-local: autocast regions belong to their thread.
thread_local std::vector<std::shared_ptr<Fp8ModuleState>> t_pending;
thread_local uint64_t t_region = 0;
thread_local RecomputeScope* t_capturing = nullptr;
thread_local RecomputeScope* t_replaying = nullptr;
std::atomic<uint64_t> g_next_region{1};
std::atomic<bool> g_amax_check{false};

float fp8_max(fp8::Format format) { return fp8::format_info(format).max; }

// Names the first non-finite amax a boundary would use, before anything is
// updated. Torch ops, so it runs on the histories' device (on CUDA the
// .item() is the check mode's one synchronisation).
void check_finite(const Fp8ModuleState& state, bool forward_set) {
  const at::Tensor& history = forward_set ? state.fwd_history() : state.bwd_history();
  const at::Tensor amax = state.recipe().amax_compute_algo == fp8::AmaxAlgo::kMax
                              ? history.amax(0)
                              : history.select(0, 0);
  const at::Tensor bad = amax.isfinite().logical_not();
  if (!bad.any().item<bool>()) return;
  const int64_t index = bad.nonzero().select(1, 0).select(0, 0).item<int64_t>();
  const float value = amax.select(0, index).item<float>();
  GL_CHECK_VALUE(false, state.name(), ": amax of ", state.tensor_name(forward_set, index), " is ",
                 value,
                 " at the FP8 step boundary (autocast exit); expected a finite value (an overflow "
                 "or NaN upstream; no scale was updated)");
}

fp8::DelayedScalingUpdate update_set(const at::Tensor& history, const at::Tensor& scale,
                                     const at::Tensor& scale_inv, fp8::Format format) {
  fp8::DelayedScalingUpdate set;
  set.group.history = history.data_ptr<float>();
  set.group.scale = scale.data_ptr<float>();
  set.group.scale_inv = scale_inv.data_ptr<float>();
  set.group.history_len = history.size(0);
  set.group.num_tensors = history.size(1);
  set.fp8_max = fp8_max(format);
  return set;
}

void run_step_boundary(const std::vector<std::shared_ptr<Fp8ModuleState>>& states) {
  std::vector<const Fp8ModuleState*> delayed;
  for (const auto& state : states)
    if (state->delayed() && state->recipe().kind == fp8::RecipeKind::kDelayed)
      delayed.push_back(state.get());
  if (delayed.empty()) return;
  if (g_amax_check.load(std::memory_order_relaxed)) {
    for (const Fp8ModuleState* state : delayed) {
      check_finite(*state, /*forward_set=*/true);
      check_finite(*state, /*forward_set=*/false);
    }
  }
  // One update per (device, margin, algo): usually one for the whole model.
  std::vector<bool> done(delayed.size(), false);
  for (size_t i = 0; i < delayed.size(); ++i) {
    if (done[i]) continue;
    const Fp8ModuleState& first = *delayed[i];
    const at::Device device = first.fwd_history().device();
    const int margin = first.recipe().margin;
    const fp8::AmaxAlgo algo = first.recipe().amax_compute_algo;
    std::vector<fp8::DelayedScalingUpdate> sets;
    for (size_t j = i; j < delayed.size(); ++j) {
      const Fp8ModuleState& s = *delayed[j];
      if (done[j] || s.fwd_history().device() != device || s.recipe().margin != margin ||
          s.recipe().amax_compute_algo != algo)
        continue;
      done[j] = true;
      sets.push_back(update_set(s.fwd_history(), s.fwd_scale(), s.fwd_scale_inv(),
                                fp8::forward_format(s.recipe())));
      sets.push_back(update_set(s.bwd_history(), s.bwd_scale(), s.bwd_scale_inv(),
                                fp8::backward_format(s.recipe())));
    }
    c10::OptionalDeviceGuard guard(device);
    fp8::update_delayed_scaling(sets.data(), static_cast<int>(sets.size()), margin, algo,
                                /*check_finite=*/false, exec_context(device));
  }
}

}  // namespace

// ---- the state ----------------------------------------------------------------

Fp8ModuleState::Fp8ModuleState(int64_t num_groups, std::string name)
    : num_groups_(num_groups), name_(std::move(name)) {
  GL_CHECK_VALUE(num_groups >= 1, "num_groups: got ", num_groups, ", expected an int >= 1");
}

void Fp8ModuleState::allocate_delayed(int64_t history_len, const at::Device& device) {
  // The state outlives the call, like a parameter: never an inference tensor
  // (a first FP8 call under torch.inference_mode would otherwise leave
  // buffers that later in-place loads may not write).
  c10::InferenceMode not_inference(false);
  const at::TensorOptions options = at::TensorOptions().dtype(at::kFloat).device(device);
  fwd_history_ = at::zeros({history_len, 1 + num_groups_}, options);
  fwd_scale_ = at::ones({1 + num_groups_}, options);
  fwd_scale_inv_ = at::ones({1 + num_groups_}, options);
  bwd_history_ = at::zeros({history_len, 1}, options);
  bwd_scale_ = at::ones({1}, options);
  bwd_scale_inv_ = at::ones({1}, options);
}

// Another thread's region holds this state (its scales, histories and
// weight cache change under that thread's casts and step boundary).
void Fp8ModuleState::fail_if_held_elsewhere(const char* action) const {
  if (registered_region_ != 0 && registered_region_ != t_region)
    detail::fail(ErrorKind::kRuntime,
                 detail::concat(name_,
                                ": its FP8 state is in use by another thread's "
                                "grouped_linear.autocast region; ",
                                action,
                                " (give each thread its own copy, e.g. copy.deepcopy, or "
                                "wait: the state is free again when that region exits)"));
}

void Fp8ModuleState::check_not_held_elsewhere(const char* action) {
  std::lock_guard<std::mutex> lock(mutex_);
  fail_if_held_elsewhere(action);
}

// Held by this thread's region from now on; its exit runs the step boundary.
void Fp8ModuleState::register_with_region() {
  fail_if_held_elsewhere("one module cannot run FP8 in two threads at once");
  if (registered_region_ != t_region) {
    registered_region_ = t_region;
    t_pending.push_back(shared_from_this());
  }
}

void Fp8ModuleState::join_region() {
  if (t_region == 0) return;  // no region, no step boundary to join
  std::lock_guard<std::mutex> lock(mutex_);
  register_with_region();
}

void Fp8ModuleState::begin_forward(const fp8::Recipe& recipe, const at::Device& device) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (t_replaying != nullptr) {
    // A recomputation: the forward it repeats registered and cast already.
    // It runs in backward, on CUDA on the autograd engine's thread, while
    // the region of its own step may still hold the state: no region check.
    GL_CHECK(recipe.kind != fp8::RecipeKind::kDelayed || t_replaying->scales_of(this) != nullptr,
             name_, ": recomputing an FP8 forward whose own forward recorded no scales");
    return;
  }
  // Registered for every recipe (the boundary updates delayed ones only), so
  // that the state is held by this region until it ends.
  register_with_region();
  // A cache made under another recipe or format does not match what this
  // forward would cast.
  if (weight_cache_.has_value() && (weight_cache_->spec.kind != recipe.kind ||
                                    weight_cache_->spec.format != fp8::forward_format(recipe)))
    weight_cache_.reset();
  recipe_ = recipe;
  has_recipe_ = true;
  if (recipe.kind != fp8::RecipeKind::kDelayed) return;
  if (!delayed() || fwd_history_.size(0) != recipe.amax_history_len) {
    allocate_delayed(recipe.amax_history_len, device);
  } else if (fwd_history_.device() != device) {  // the module moved
    c10::InferenceMode not_inference(false);
    fwd_history_ = fwd_history_.to(device);
    fwd_scale_ = fwd_scale_.to(device);
    fwd_scale_inv_ = fwd_scale_inv_.to(device);
    bwd_history_ = bwd_history_.to(device);
    bwd_scale_ = bwd_scale_.to(device);
    bwd_scale_inv_ = bwd_scale_inv_.to(device);
  }
  // Inside activation_checkpoint's forward: the scales these casts read, for
  // its recomputation (the first forward of the state in the scope: no step
  // boundary falls inside one forward).
  if (t_capturing != nullptr && t_capturing->scales_of(this) == nullptr)
    t_capturing->scales.emplace_back(shared_from_this(), fwd_scale_.clone());
}

void Fp8ModuleState::end_region() {
  std::lock_guard<std::mutex> lock(mutex_);
  registered_region_ = 0;
}

// A recomputation casts with the recorded scales and records no amax.
fp8::ScaleState Fp8ModuleState::input_state() const {
  if (t_replaying != nullptr)
    if (const at::Tensor* scales = t_replaying->scales_of(this))
      return {scales->data_ptr<float>(), nullptr};
  if (!delayed() || recipe_.kind != fp8::RecipeKind::kDelayed) return {};
  return {fwd_scale_.data_ptr<float>(), fwd_history_.data_ptr<float>()};
}

fp8::ScaleState Fp8ModuleState::weight_state() const {
  if (t_replaying != nullptr)
    if (const at::Tensor* scales = t_replaying->scales_of(this))
      return {scales->data_ptr<float>() + 1, nullptr};
  if (!delayed() || recipe_.kind != fp8::RecipeKind::kDelayed) return {};
  return {fwd_scale_.data_ptr<float>() + 1, fwd_history_.data_ptr<float>() + 1};
}

fp8::ScaleState Fp8ModuleState::grad_output_state() const {
  if (!delayed() || recipe_.kind != fp8::RecipeKind::kDelayed) return {};
  return {bwd_scale_.data_ptr<float>(), bwd_history_.data_ptr<float>()};
}

void Fp8ModuleState::reset() {
  recipe_ = fp8::Recipe{};
  has_recipe_ = false;
  fwd_history_ = fwd_scale_ = fwd_scale_inv_ = at::Tensor();
  bwd_history_ = bwd_scale_ = bwd_scale_inv_ = at::Tensor();
  weight_cache_.reset();
}

std::string Fp8ModuleState::tensor_name(bool forward_set, int64_t index) const {
  if (!forward_set) return "grad_output";
  if (index == 0) return "input";
  return num_groups_ == 1 ? std::string("weight") : "weight" + std::to_string(index - 1);
}

at::Tensor Fp8ModuleState::state_dict() const {
  const int64_t history_len = delayed() ? fwd_history_.size(0) : 0;
  const at::TensorOptions options =
      at::TensorOptions().dtype(at::kFloat).device(delayed() ? fwd_history_.device() : at::kCPU);
  const at::Tensor header =
      at::tensor(
          {static_cast<float>(kStateVersion), static_cast<float>(num_groups_),
           static_cast<float>(history_len), static_cast<float>(recipe_.format),
           static_cast<float>(recipe_.margin), static_cast<float>(recipe_.amax_compute_algo)},
          at::TensorOptions().dtype(at::kFloat))
          .to(options.device());
  if (!delayed()) return header;
  return at::cat(
      {header, fwd_history_.reshape(-1), fwd_scale_, bwd_history_.reshape(-1), bwd_scale_});
}

void Fp8ModuleState::load_state_dict(const at::Tensor& state) {
  check_not_held_elsewhere("its checkpoint cannot be loaded now");  // also set_extra_state
  // No FP8 state in the checkpoint (an older or per-expert one): start fresh,
  // the weights are new.
  if (!state.defined()) {
    reset();
    return;
  }
  const at::Tensor flat = state.detach().to(at::kFloat).reshape(-1);
  GL_CHECK_VALUE(flat.numel() >= kHeader, "_extra_state: ", flat.numel(),
                 " values; expected at least the ", kHeader, "-value header");
  const at::Tensor header = flat.slice(0, 0, kHeader).cpu();
  const float* h = header.data_ptr<float>();
  GL_CHECK_VALUE(h[0] == static_cast<float>(kStateVersion), "_extra_state: version ", h[0],
                 " is not supported; expected ", kStateVersion);
  GL_CHECK_VALUE(h[1] == static_cast<float>(num_groups_), "_extra_state: saved for ", h[1],
                 " groups; this module has num_gemms = ", num_groups_);
  const int64_t history_len = static_cast<int64_t>(h[2]);
  const int64_t g1 = 1 + num_groups_;
  const int64_t expected = history_len == 0 ? kHeader : kHeader + history_len * (g1 + 1) + g1 + 1;
  GL_CHECK_VALUE(history_len >= 0 && flat.numel() == expected, "_extra_state: ", flat.numel(),
                 " values for amax_history_len = ", history_len, " and ", num_groups_,
                 " groups; expected ", expected);
  GL_CHECK_VALUE(h[3] == 0.f || h[3] == 1.f || h[3] == 2.f, "_extra_state: fp8_format code ", h[3],
                 "; expected 0 (E4M3), 1 (E5M2) or 2 (HYBRID)");
  GL_CHECK_VALUE(h[4] >= 0.f, "_extra_state: margin ", h[4], "; expected >= 0");
  GL_CHECK_VALUE(h[5] == 0.f || h[5] == 1.f, "_extra_state: amax_compute_algo code ", h[5],
                 "; expected 0 (max) or 1 (most_recent)");
  // The header's recipe fields, kept either way so that the state saves
  // again as it was saved.
  fp8::Recipe saved;
  saved.format = static_cast<fp8::FormatChoice>(static_cast<int>(h[3]));
  saved.margin = static_cast<int>(h[4]);
  saved.amax_compute_algo = static_cast<fp8::AmaxAlgo>(static_cast<int>(h[5]));
  if (history_len == 0) {
    // No delayed-scaling buffers (a current or blockwise recipe, or no step
    // yet): nothing else to load.
    reset();
    recipe_ = saved;
    return;
  }
  // Everything checked: now replace the state. Buffers of the same shape
  // take the values in place, as load_state_dict does for parameters, so
  // that a captured CUDA graph (which holds their addresses) sees them;
  // otherwise new buffers stay on the checkpoint's device (map_location)
  // until a forward moves them.
  int64_t at_value = kHeader;
  const auto take = [&](int64_t count) {
    const at::Tensor part = flat.slice(0, at_value, at_value + count);
    at_value += count;
    return part;
  };
  // (Not into inference tensors, which states made by other versions may
  // hold: torch forbids writing them outside inference mode.)
  const bool in_place =
      delayed() && fwd_history_.size(0) == history_len && !fwd_history_.is_inference();
  c10::InferenceMode not_inference(false);
  const auto assign = [&](at::Tensor& buffer, const at::Tensor& values, at::IntArrayRef shape) {
    if (in_place)
      buffer.view(-1).copy_(values);
    else
      buffer = values.clone().view(shape);
  };
  assign(fwd_history_, take(history_len * g1), {history_len, g1});
  assign(fwd_scale_, take(g1), {g1});
  assign(bwd_history_, take(history_len), {history_len, 1});
  assign(bwd_scale_, take(1), {1});
  if (in_place) {
    at::reciprocal_out(fwd_scale_inv_, fwd_scale_);
    at::reciprocal_out(bwd_scale_inv_, bwd_scale_);
  } else {
    fwd_scale_inv_ = fwd_scale_.reciprocal();
    bwd_scale_inv_ = bwd_scale_.reciprocal();
  }
  recipe_ = saved;
  recipe_.kind = fp8::RecipeKind::kDelayed;
  recipe_.amax_history_len = static_cast<int>(history_len);
  has_recipe_ = true;
  weight_cache_.reset();
}

// ---- recomputation --------------------------------------------------------------

const at::Tensor* RecomputeScope::scales_of(const Fp8ModuleState* state) const {
  for (const auto& entry : scales)
    if (entry.first.get() == state) return &entry.second;
  return nullptr;
}

RecomputeScope* set_capturing_scope(RecomputeScope* scope) {
  RecomputeScope* previous = t_capturing;
  t_capturing = scope;
  return previous;
}

RecomputeScope* set_replaying_scope(RecomputeScope* scope) {
  RecomputeScope* previous = t_replaying;
  t_replaying = scope;
  return previous;
}

// ---- step boundary --------------------------------------------------------------

void begin_autocast_region() {
  t_region = g_next_region.fetch_add(1, std::memory_order_relaxed);
  t_pending.clear();
}

void end_autocast_region() {
  std::vector<std::shared_ptr<Fp8ModuleState>> states;
  states.swap(t_pending);
  t_region = 0;
  // The states are free for other threads once their update is done, also
  // when it raises (check mode).
  struct Release {
    const std::vector<std::shared_ptr<Fp8ModuleState>>& states;
    ~Release() {
      for (const auto& state : states) state->end_region();
    }
  } release{states};
  run_step_boundary(states);
}

void set_amax_check(bool enabled) { g_amax_check.store(enabled, std::memory_order_relaxed); }
bool amax_check() { return g_amax_check.load(std::memory_order_relaxed); }

}  // namespace grouped_linear::torch_binding
