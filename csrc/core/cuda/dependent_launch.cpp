#include "core/cuda/dependent_launch.h"

#include <atomic>

#include "core/cuda/device_info.h"
#include "core/env_switch.h"

namespace grouped_linear::cuda {
namespace {

std::atomic<bool>& setting() {
  static std::atomic<bool> enabled{env_switch("GROUPED_LINEAR_DEPENDENT_LAUNCH", true)};
  return enabled;
}

}  // namespace

bool dependent_launch() { return setting().load(std::memory_order_relaxed); }

void set_dependent_launch(bool enabled) { setting().store(enabled, std::memory_order_relaxed); }

int dependent_launch_attribute(int device, cudaLaunchAttribute* attribute) {
  if (!dependent_launch() || device_info(device).major < 9) return 0;
  *attribute = cudaLaunchAttribute{};
  attribute->id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute->val.programmaticStreamSerializationAllowed = 1;
  return 1;
}

}  // namespace grouped_linear::cuda
