// The core's ExecContext for a torch device: the current stream and an
// allocator on torch's caching allocator. CUDA parts live in
// cuda_exec_context.cpp, built only against a CUDA build of torch.
#pragma once

#include <ATen/ATen.h>

#include "core/grouped_gemm.h"

namespace grouped_linear::torch_binding {

ExecContext exec_context(const at::Device& device);

#ifdef GL_WITH_CUDA
ExecContext cuda_exec_context(const at::Device& device);
#endif

}  // namespace grouped_linear::torch_binding
