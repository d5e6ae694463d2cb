#include "core/builtin_engines.h"
#include "core/cuda/cublas_engine.h"
#include "core/engine_registry.h"

namespace grouped_linear {

void register_cuda_engines() { register_engine(DeviceType::kCUDA, &cuda::cublas_engine()); }

}  // namespace grouped_linear
