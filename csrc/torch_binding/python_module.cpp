// grouped_linear._C: the Python face of the binding. Converts Python
// arguments (m_splits above all) once, then calls the C++ layer.
#include <torch/extension.h>

#include "core/engine_registry.h"
#include "core/error.h"
#include "core/log.h"
#include "core/nvtx.h"
#include "torch_binding/autograd_function.h"
#include "torch_binding/engines.h"
#include "torch_binding/fp8_autograd.h"
#include "torch_binding/fp8_bindings.h"
#include "torch_binding/fp8_gemm_ops.h"
#include "torch_binding/fp8_state.h"
#include "torch_binding/fp8_tensors.h"
#include "torch_binding/grouped_ops.h"
#include "torch_binding/op_registration.h"
#include "torch_binding/python_errors.h"
#include "torch_binding/tensor_views.h"

#ifdef GL_WITH_CUDA
#include "core/cuda/dependent_launch.h"
#endif

namespace py = pybind11;

namespace grouped_linear::torch_binding {
namespace {

std::string python_repr(py::handle obj) {
  try {
    std::string text = py::repr(obj).cast<std::string>();
    return text.size() > 80 ? text.substr(0, 77) + "..." : text;
  } catch (const py::error_already_set&) {
    return "<unprintable>";
  }
}

// m_splits: a list/tuple of ints or a 1-D integer tensor. Parsed in C++, so
// the Python side does the same O(1) work for every number of groups.
GroupSplits parse_splits(py::handle obj, const at::Tensor& inp) {
  if (THPVariable_Check(obj.ptr()))
    return splits_from_tensor(THPVariable_Unpack(obj.ptr()), inp.device());
  GL_CHECK_TYPE(PyList_Check(obj.ptr()) || PyTuple_Check(obj.ptr()),
                "m_splits: expected a list or tuple of ints or a 1-D integer tensor, got ",
                Py_TYPE(obj.ptr())->tp_name);
  py::sequence seq = py::reinterpret_borrow<py::sequence>(obj);
  std::vector<int64_t> counts(seq.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(obj.ptr(), i);
    if (PyLong_CheckExact(item)) {  // the common case: a plain int (never a bool)
      int overflow = 0;
      const long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
      GL_CHECK_VALUE(overflow == 0, "m_splits: entry ", i, " is ", python_repr(item),
                     "; expected a row count that fits in int64");
      counts[i] = value;
      continue;
    }
    GL_CHECK_TYPE(!PyBool_Check(item) && PyIndex_Check(item), "m_splits: entry ", i, " is ",
                  python_repr(item), " (", Py_TYPE(item)->tp_name, "); expected an int");
    py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(item));
    if (!index) {
      PyErr_Clear();  // __index__ raised: report it as a bad entry
      GL_CHECK_TYPE(false, "m_splits: entry ", i, " is ", python_repr(item), "; expected an int");
    }
    int overflow = 0;
    const long long value = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    GL_CHECK_VALUE(overflow == 0, "m_splits: entry ", i, " is ", python_repr(item),
                   "; expected a row count that fits in int64");
    counts[i] = value;
  }
  return splits_from_host(std::move(counts));
}

at::Tensor optional_tensor(const std::optional<at::Tensor>& t) {
  return t.has_value() ? *t : at::Tensor();
}

// None, True or False (Transformer Engine's is_first_microbatch).
std::optional<bool> parse_first_microbatch(py::handle obj) {
  if (obj.is_none()) return std::nullopt;
  GL_CHECK_TYPE(obj.ptr() == Py_True || obj.ptr() == Py_False, "is_first_microbatch: got ",
                python_repr(obj), " (", Py_TYPE(obj.ptr())->tp_name,
                "); expected None, True or False");
  return obj.ptr() == Py_True;
}

Fp8Call make_fp8_call(const std::shared_ptr<Fp8ModuleState>& state, py::handle first) {
  return Fp8Call{state, parse_first_microbatch(first)};
}

at::Tensor py_grouped_linear(const at::Tensor& inp, const at::Tensor& weight,
                             const std::optional<at::Tensor>& bias, py::handle m_splits,
                             const std::optional<at::Tensor>& main_grad, const LinearConfig& config,
                             const std::shared_ptr<Fp8ModuleState>& fp8_state,
                             py::handle is_first_microbatch) {
  GL_CHECK_VALUE(weight.dim() == 3,
                 "weight: expected a 3-D [num_gemms, out_features, "
                 "in_features] tensor, got shape ",
                 weight.sizes());
  GroupSplits splits = parse_splits(m_splits, inp);
  check_split_count(splits, weight.size(0));
  return grouped_linear(inp, weight, optional_tensor(bias), std::move(splits),
                        optional_tensor(main_grad), config,
                        make_fp8_call(fp8_state, is_first_microbatch));
}

at::Tensor py_linear(const at::Tensor& inp, const at::Tensor& weight,
                     const std::optional<at::Tensor>& bias,
                     const std::optional<at::Tensor>& main_grad, const LinearConfig& config,
                     const std::shared_ptr<Fp8ModuleState>& fp8_state,
                     py::handle is_first_microbatch) {
  GL_CHECK_VALUE(weight.dim() == 2,
                 "weight: expected a 2-D [out_features, in_features] tensor, "
                 "got shape ",
                 weight.sizes());
  GL_CHECK_VALUE(inp.dim() >= 1, "inp: expected at least 1 dimension, got a 0-D tensor");
  int64_t leading = 1;
  for (int64_t d = 0; d + 1 < inp.dim(); ++d) leading *= inp.size(d);
  return grouped_linear(inp, weight, optional_tensor(bias), splits_from_host({leading}),
                        optional_tensor(main_grad), config,
                        make_fp8_call(fp8_state, is_first_microbatch));
}

LinearConfig make_config(bool fuse, bool save_original_input, bool delay_wgrad_compute) {
  LinearConfig config{fuse, save_original_input};
  if (delay_wgrad_compute) config.wgrad_store = c10::make_intrusive<WgradStore>();
  return config;
}

bool py_backward_dw(const LinearConfig& config, const at::Tensor& weight,
                    const std::optional<at::Tensor>& bias) {
  if (!config.wgrad_store) return false;  // delay_wgrad_compute off: nothing is ever stashed
  return run_backward_dw(*config.wgrad_store, weight, optional_tensor(bias));
}

// Raw products for tests and benchmarks: no autograd, optional outputs so a
// test can poison them first.
at::Tensor py_forward(const at::Tensor& x, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias, py::handle m_splits,
                      const std::optional<at::Tensor>& out, const std::string& engine) {
  GL_CHECK_VALUE(weight.dim() == 3, "weight: expected a 3-D tensor, got shape ", weight.sizes());
  const at::Tensor rows = as_rows(x, weight.size(2), "inp", "in_features");
  return grouped_forward(rows, weight, optional_tensor(bias), parse_splits(m_splits, x), out,
                         engine);
}

at::Tensor py_dgrad(const at::Tensor& dy, const at::Tensor& weight, py::handle m_splits,
                    const std::optional<at::Tensor>& out, const std::string& engine) {
  GL_CHECK_VALUE(weight.dim() == 3, "weight: expected a 3-D tensor, got shape ", weight.sizes());
  const at::Tensor rows = as_rows(dy, weight.size(1), "grad_output", "out_features");
  return grouped_dgrad(rows, weight, parse_splits(m_splits, dy), out, engine);
}

py::tuple py_wgrad(const at::Tensor& dy, const at::Tensor& x, py::handle m_splits,
                   const std::optional<at::Tensor>& grad_weight, bool accumulate, bool weight_grad,
                   bool bias_grad, const std::optional<at::Tensor>& grad_bias,
                   const std::string& engine) {
  WgradRequest request;
  request.weight_grad = weight_grad;
  request.bias_grad = bias_grad;
  request.accumulate = accumulate;
  request.grad_weight = optional_tensor(grad_weight);
  request.grad_bias = optional_tensor(grad_bias);
  request.engine = engine;
  auto grads = grouped_wgrad(dy, x, parse_splits(m_splits, x), request);
  auto to_py = [](const at::Tensor& t) -> py::object {
    return t.defined() ? py::cast(t) : py::none();
  };
  return py::make_tuple(to_py(grads.first), to_py(grads.second));
}

DeviceType parse_device_type(const std::string& device_type) {
  if (device_type == "cpu") return DeviceType::kCPU;
  GL_CHECK_VALUE(device_type == "cuda", "device_type: '", device_type,
                 "' is not supported; expected 'cpu' or 'cuda'");
  return DeviceType::kCUDA;
}

std::string engine_name_for(const at::Device& device) {
  return engine_for(to_core_device(device)).name();
}

std::vector<std::string> engine_names_for(const std::string& device_type) {
  return engine_names(parse_device_type(device_type));
}

void set_override(const std::string& device_type, const std::string& name) {
  set_engine_override(parse_device_type(device_type), name);
}

std::vector<std::string> kernel_names_for(const std::string& device_type,
                                          const std::string& engine) {
  return engine_by_name(parse_device_type(device_type), engine).kernel_names();
}

void set_kernel_override_for(const std::string& device_type, const std::string& engine,
                             const std::string& kernel) {
  engine_by_name(parse_device_type(device_type), engine).set_kernel_override(kernel);
}

void set_tile_order_for(const std::string& device_type, const std::string& engine,
                        const std::string& order) {
  engine_by_name(parse_device_type(device_type), engine).set_tile_order(order);
}

void set_l2_promotion_for(const std::string& device_type, const std::string& engine,
                          const std::string& promotion) {
  engine_by_name(parse_device_type(device_type), engine).set_l2_promotion(promotion);
}

}  // namespace
}  // namespace grouped_linear::torch_binding

PYBIND11_MODULE(_C, m) {
  using namespace grouped_linear;
  using namespace grouped_linear::torch_binding;
  m.doc() = "grouped_linear native extension: grouped GEMM engines behind torch ops";

  register_builtin_engines();
#ifdef GL_WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif

  py::class_<LinearConfig>(m, "LinearConfig")
      .def(py::init(&make_config), py::arg("fuse_wgrad_accumulation") = false,
           py::arg("save_original_input") = false, py::arg("delay_wgrad_compute") = false)
      .def_readonly("fuse_wgrad_accumulation", &LinearConfig::fuse_wgrad_accumulation)
      .def_readonly("save_original_input", &LinearConfig::save_original_input)
      .def_property_readonly("delay_wgrad_compute",
                             [](const LinearConfig& c) { return bool(c.wgrad_store); })
      .def_property_readonly(
          "pending_wgrads",
          [](const LinearConfig& c) { return c.wgrad_store ? c.wgrad_store->size() : size_t{0}; },
          "delay_wgrad_compute: backwards whose weight gradients wait for backward_dw.")
      .def(py::pickle(  // modules holding a config can be deep-copied and pickled
          [](const LinearConfig& c) {
            // The stash is not state: a copy starts with none pending.
            return py::make_tuple(c.fuse_wgrad_accumulation, c.save_original_input,
                                  bool(c.wgrad_store));
          },
          [](const py::tuple& state) {
            return make_config(state[0].cast<bool>(), state.size() > 1 && state[1].cast<bool>(),
                               state.size() > 2 && state[2].cast<bool>());
          }));
  m.def("backward_dw", guarded(&py_backward_dw), py::arg("config"), py::arg("weight"),
        py::arg("bias") = py::none(),
        "delay_wgrad_compute: computes the oldest stashed weight (and bias) gradients into "
        "weight.grad / bias.grad (added when set) or main_grad; False if none was stashed.");

  // FP8 first: grouped_linear's signature names _C.fp8.ModuleState.
  register_fp8(m);

  m.def("grouped_linear", guarded(&py_grouped_linear), py::arg("inp"), py::arg("weight"),
        py::arg("bias"), py::arg("m_splits"), py::arg("main_grad"), py::arg("config"),
        py::arg("fp8_state") = nullptr, py::arg("is_first_microbatch") = py::none(),
        "Differentiable grouped linear: inp [..., K], weight [G, N, K], bias [G, N] or None. "
        "Inside grouped_linear.autocast it runs in FP8 with the module's fp8_state.");
  m.def("linear", guarded(&py_linear), py::arg("inp"), py::arg("weight"), py::arg("bias"),
        py::arg("main_grad"), py::arg("config"), py::arg("fp8_state") = nullptr,
        py::arg("is_first_microbatch") = py::none(),
        "Differentiable linear (one group): inp [..., K], weight [N, K], bias [N] or None.");

  py::module_ ops = m.def_submodule("ops", "The three products without autograd.");
  ops.def("forward", guarded(&py_forward), py::arg("inp"), py::arg("weight"), py::arg("bias"),
          py::arg("m_splits"), py::kw_only(), py::arg("out") = py::none(), py::arg("engine") = "");
  ops.def("dgrad", guarded(&py_dgrad), py::arg("grad_output"), py::arg("weight"),
          py::arg("m_splits"), py::kw_only(), py::arg("out") = py::none(), py::arg("engine") = "");
  ops.def("wgrad", guarded(&py_wgrad), py::arg("grad_output"), py::arg("inp"), py::arg("m_splits"),
          py::kw_only(), py::arg("grad_weight") = py::none(), py::arg("accumulate") = false,
          py::arg("weight_grad") = true, py::arg("bias_grad") = false,
          py::arg("grad_bias") = py::none(), py::arg("engine") = "");
  register_fp8_gemm_ops(ops);
  register_compile_support(m);

  m.def("engine_names", guarded(&engine_names_for), py::arg("device_type"));
  m.def("engine_for", guarded(&engine_name_for), py::arg("device"),
        "Name of the engine that runs problems on this device.");
  m.def("set_engine_override", guarded(&set_override), py::arg("device_type"), py::arg("name"));
  m.def("kernel_names", guarded(&kernel_names_for), py::arg("device_type"), py::arg("engine"),
        "Kernels (tile configurations) an engine chooses among; empty for single-kernel engines.");
  m.def("set_kernel_override", guarded(&set_kernel_override_for), py::arg("device_type"),
        py::arg("engine"), py::arg("kernel"),
        "Force one kernel of an engine by name ('' restores the automatic choice).");
  m.def("set_tile_order", guarded(&set_tile_order_for), py::arg("device_type"), py::arg("engine"),
        py::arg("order"),
        "The order in which an engine's CTAs walk each group's output tiles: 'along_m', "
        "'along_n' or 'shorter_side' ('' restores the automatic one).");
  m.def("set_l2_promotion", guarded(&set_l2_promotion_for), py::arg("device_type"),
        py::arg("engine"), py::arg("promotion"),
        "How much L2 fetches per miss of an engine's operand loads: '128B' or '256B' ('' "
        "restores the default, 128B).");
  m.def(
      "diagnostics",
      [] {
        py::dict d;
        d["log_level"] = log::level_name(log::level());
        d["nvtx_compiled"] = nvtx::compiled_in();
        d["nvtx_enabled"] = nvtx::enabled();
        return d;
      },
      "The diagnostics settings read from GROUPED_LINEAR_LOG_LEVEL and GROUPED_LINEAR_NVTX.");
  m.def(
      "set_dependent_launch",
      [](bool enabled) {
#ifdef GL_WITH_CUDA
        cuda::set_dependent_launch(enabled);
#else
        (void)enabled;
#endif
      },
      py::arg("enabled"),
      "Whether the casts and grouped GEMMs launch as programmatic dependents on sm_90+ GPUs.");
  m.def(
      "dependent_launch",
      [] {
#ifdef GL_WITH_CUDA
        return cuda::dependent_launch();
#else
        return false;
#endif
      },
      "The switch set_dependent_launch sets (false in a build without CUDA).");
}
