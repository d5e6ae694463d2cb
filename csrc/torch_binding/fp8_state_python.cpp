// The Python face of Fp8ModuleState (_C.fp8.ModuleState), apart from the
// state itself so that the torch binding library stays free of Python.
#include <torch/extension.h>

#include <vector>

#include "core/error.h"
#include "core/fp8/autocast_state.h"
#include "torch_binding/fp8_bindings.h"
#include "torch_binding/fp8_state.h"
#include "torch_binding/python_errors.h"

namespace py = pybind11;

namespace grouped_linear::torch_binding {

namespace {

py::object optional_tensor(const at::Tensor& t) { return t.defined() ? py::cast(t) : py::none(); }

std::shared_ptr<Fp8ModuleState> make_state(int64_t num_groups, const std::string& name) {
  return std::make_shared<Fp8ModuleState>(num_groups, name);
}

// None (a checkpoint without FP8 state) or the saved float32 tensor.
void load_state(Fp8ModuleState& s, const py::object& state) {
  if (state.is_none()) {
    s.load_state_dict(at::Tensor());
    return;
  }
  GL_CHECK_TYPE(THPVariable_Check(state.ptr()), "_extra_state: got ", Py_TYPE(state.ptr())->tp_name,
                ", expected the float32 tensor GroupedLinear / Linear save (or None)");
  s.load_state_dict(THPVariable_Unpack(state.ptr()));
}

// A checkpoint load's first step (the load_state_dict pre-hook): refused,
// before any parameter is copied, while another thread's region holds the
// state.
void check_free_to_load(Fp8ModuleState& s) {
  s.check_not_held_elsewhere("its checkpoint cannot be loaded now");
}

void join_region(Fp8ModuleState& s) { s.join_region(); }

// activation_checkpoint's two contexts (python/grouped_linear/recompute.py).
// Scopes nest per thread; the Python side holds each scope while it is set.
thread_local std::vector<RecomputeScope*> t_previous_capturing, t_previous_replaying;

void capture_enter(const std::shared_ptr<RecomputeScope>& scope) {
  t_previous_capturing.push_back(set_capturing_scope(scope.get()));
}
void capture_exit() {
  GL_CHECK(!t_previous_capturing.empty(), "recompute: capture_exit without capture_enter");
  set_capturing_scope(t_previous_capturing.back());
  t_previous_capturing.pop_back();
}
// The recomputation runs under the forward's autocast state, pushed without
// opening a region: it must not run a step boundary when it ends.
void replay_enter(const std::shared_ptr<RecomputeScope>& scope, bool enabled,
                  const fp8::Recipe& recipe) {
  fp8::AutocastState state;
  state.enabled = enabled;
  state.recipe = recipe;
  fp8::push(state);
  t_previous_replaying.push_back(set_replaying_scope(scope.get()));
}
void replay_exit() {
  GL_CHECK(!t_previous_replaying.empty(), "recompute: replay_exit without replay_enter");
  set_replaying_scope(t_previous_replaying.back());
  t_previous_replaying.pop_back();
  fp8::pop();
}

// The buffers keep their device, so copy.deepcopy of a CUDA module gives a
// CUDA state (torch's pickling of tensors handles either device).
py::tuple get_pickle_state(const Fp8ModuleState& s) {
  return py::make_tuple(s.num_groups(), s.name(), s.state_dict());
}

std::shared_ptr<Fp8ModuleState> from_pickle_state(const py::tuple& t) {
  GL_CHECK_VALUE(t.size() == 3, "ModuleState: bad pickle state");
  auto state = std::make_shared<Fp8ModuleState>(t[0].cast<int64_t>(), t[1].cast<std::string>());
  load_state(*state, t[2]);
  return state;
}

py::object cached_weight(const Fp8ModuleState& s, bool columnwise) {
  if (!s.weight_cache().has_value()) return py::none();
  const Fp8Weight& w = *s.weight_cache();
  if (!(columnwise ? w.col : w.row).defined()) return py::none();
  return py::cast(dequantized(w, columnwise));
}

}  // namespace

void register_fp8_state(py::module_& f) {
  py::class_<Fp8ModuleState, std::shared_ptr<Fp8ModuleState>>(
      f, "ModuleState",
      "A module's FP8 state: delayed-scaling amax histories and scales, and the quantized "
      "weights cached across micro-batches.")
      .def(py::init(guarded(&make_state)), py::arg("num_groups"), py::arg("name") = "")
      .def_property_readonly("num_groups", &Fp8ModuleState::num_groups)
      .def_property("name", &Fp8ModuleState::name, &Fp8ModuleState::set_name)
      .def_property_readonly("recipe_kind",
                             [](const Fp8ModuleState& s) -> py::object {
                               if (!s.has_recipe()) return py::none();
                               const fp8::RecipeKind k = s.recipe().kind;
                               return py::str(k == fp8::RecipeKind::kDelayed   ? "delayed"
                                              : k == fp8::RecipeKind::kCurrent ? "current"
                                                                               : "block");
                             })
      .def_property_readonly(
          "amax_history_fwd",
          [](const Fp8ModuleState& s) { return optional_tensor(s.fwd_history()); })
      .def_property_readonly("scale_fwd",
                             [](const Fp8ModuleState& s) { return optional_tensor(s.fwd_scale()); })
      .def_property_readonly(
          "scale_inv_fwd",
          [](const Fp8ModuleState& s) { return optional_tensor(s.fwd_scale_inv()); })
      .def_property_readonly(
          "amax_history_bwd",
          [](const Fp8ModuleState& s) { return optional_tensor(s.bwd_history()); })
      .def_property_readonly("scale_bwd",
                             [](const Fp8ModuleState& s) { return optional_tensor(s.bwd_scale()); })
      .def_property_readonly(
          "scale_inv_bwd",
          [](const Fp8ModuleState& s) { return optional_tensor(s.bwd_scale_inv()); })
      .def_property_readonly("has_weight_cache",
                             [](const Fp8ModuleState& s) { return s.weight_cache().has_value(); })
      .def("cached_weight", guarded(&cached_weight), py::arg("columnwise") = false,
           "The cached quantized weight, dequantized to float32 [G, N, K] (None without a cache).")
      .def("drop_weight_cache", &Fp8ModuleState::drop_weight_cache)
      .def("reset", &Fp8ModuleState::reset)
      .def("state_dict", &Fp8ModuleState::state_dict)
      .def("load_state_dict", guarded(&load_state), py::arg("state"))
      .def("check_free_to_load", guarded(&check_free_to_load),
           "RuntimeError while another thread's autocast region holds the state.")
      .def("join_region", guarded(&join_region),
           "Register with this thread's outermost autocast region (no-op outside one), whose "
           "exit then runs the step boundary: for forwards replayed from a CUDA graph.")
      .def(py::pickle(&get_pickle_state, guarded(&from_pickle_state)));

  py::class_<RecomputeScope, std::shared_ptr<RecomputeScope>>(
      f, "RecomputeScope",
      "The forward scales of the FP8 layers an activation-checkpointed forward ran, for "
      "its recomputation.")
      .def(py::init<>())
      .def_property_readonly("num_states", [](const RecomputeScope& s) { return s.scales.size(); });
  f.def("recompute_capture_enter", guarded(&capture_enter), py::arg("scope"));
  f.def("recompute_capture_exit", guarded(&capture_exit));
  f.def("recompute_replay_enter", guarded(&replay_enter), py::arg("scope"), py::arg("enabled"),
        py::arg("recipe"));
  f.def("recompute_replay_exit", guarded(&replay_exit));
  f.def("set_amax_check", &set_amax_check, py::arg("enabled"),
        "Check mode: a non-finite amax at the step boundary raises, naming the tensor.");
  f.def("amax_check", &amax_check);
}

}  // namespace grouped_linear::torch_binding
