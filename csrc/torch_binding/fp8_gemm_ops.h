// grouped_linear._C.ops.fp8_{forward,dgrad,wgrad}: the FP8 products on
// operands that are already quantized (torch float8 tensors plus float32
// scale_inv, per-tensor scaling), without autograd. For the kernel tests and
// the benchmark; the modules go through the FP8 autograd function.
#pragma once

#include <torch/extension.h>

namespace grouped_linear::torch_binding {

void register_fp8_gemm_ops(pybind11::module_& ops);

}  // namespace grouped_linear::torch_binding
