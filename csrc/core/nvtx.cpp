#include "core/nvtx.h"

#include <cstdlib>
#include <string>

#include "core/log.h"

#ifdef GL_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace grouped_linear::nvtx {

bool compiled_in() {
#ifdef GL_WITH_NVTX
  return true;
#else
  return false;
#endif
}

bool enabled_from_env() {
  const char* text = std::getenv("GROUPED_LINEAR_NVTX");
  if (text == nullptr) return false;
  bool on = false;
  const std::string value(text);
  for (const char* yes : {"1", "true", "TRUE", "True", "on", "ON", "yes"}) on = on || value == yes;
  if (on && !compiled_in()) {
    GL_LOG_WARN(
        "GROUPED_LINEAR_NVTX is set but this build has no NVTX (a CPU build, or "
        "nvtx3/nvToolsExt.h was not found at configure time): no ranges");
    return false;
  }
  return on;
}

void push(const char* name) {
#ifdef GL_WITH_NVTX
  nvtxRangePushA(name);
#else
  (void)name;
#endif
}

void pop() {
#ifdef GL_WITH_NVTX
  nvtxRangePop();
#endif
}

}  // namespace grouped_linear::nvtx
