// Engine registration for whatever loads the binding: the Python extension at
// import, the C++ API on first module construction.
#pragma once

namespace grouped_linear::torch_binding {

// Registers the engines this build has (CPU, plus CUDA against a CUDA build of
// torch) and the CUDA FP8 emulation's converter. Idempotent and thread-safe.
void register_builtin_engines();

}  // namespace grouped_linear::torch_binding
