// Registers the engines this build contains. Bindings call it once at load.
#pragma once

namespace grouped_linear {

// The CPU reference engine; always built.
void register_cpu_engines();

// The CUDA engines; defined only in builds with CUDA (the gl_core_cuda target).
void register_cuda_engines();

}  // namespace grouped_linear
