#include "core/builtin_engines.h"

#include "core/cpu/cpu_engine.h"
#include "core/engine_registry.h"

namespace grouped_linear {

void register_cpu_engines() { register_engine(DeviceType::kCPU, &cpu::reference_engine()); }

}  // namespace grouped_linear
