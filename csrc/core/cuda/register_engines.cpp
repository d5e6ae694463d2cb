#include "core/builtin_engines.h"
#include "core/cuda/cublas_engine.h"
#include "core/engine_registry.h"
#ifdef GL_WITH_SM90_ENGINE
#include "core/cuda/sm90_grouped_engine.h"
#endif

namespace grouped_linear {

// Order is preference: the first engine available on a device is its default.
void register_cuda_engines() {
#ifdef GL_WITH_SM90_ENGINE
  register_engine(DeviceType::kCUDA, &cuda::sm90_grouped_engine());
#endif
  register_engine(DeviceType::kCUDA, &cuda::cublas_engine());
}

}  // namespace grouped_linear
