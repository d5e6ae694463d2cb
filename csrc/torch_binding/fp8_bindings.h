// grouped_linear._C.fp8: recipes as C++ values, the thread's FP8 autocast
// state, and the CPU quantization reference on torch tensors.
#pragma once

#include <torch/extension.h>

namespace grouped_linear::torch_binding {

void register_fp8(pybind11::module_& m);

// _C.fp8.ModuleState (fp8_state_python.cpp).
void register_fp8_state(pybind11::module_& fp8_module);

}  // namespace grouped_linear::torch_binding
