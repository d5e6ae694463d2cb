#include "torch_binding/engines.h"

#include <mutex>

#include "core/builtin_engines.h"
#include "torch_binding/fp8_tensors.h"

namespace grouped_linear::torch_binding {

void register_builtin_engines() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_cpu_engines();
#ifdef GL_WITH_CUDA
    register_cuda_engines();
#endif
    register_fp8_emulation();
  });
}

}  // namespace grouped_linear::torch_binding
