#include "core/builtin_engines.h"
#include "core/cuda/cublas_engine.h"
#include "core/engine_registry.h"
#include "core/fp8/quantize_ops_backend.h"
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
  // The FP8 quantize kernels live beside the engines: same library, same
  // registration point, so a build with CUDA always has both.
  fp8::register_cuda_quantize_ops();
}

}  // namespace grouped_linear
