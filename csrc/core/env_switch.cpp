#include "core/env_switch.h"

#include <cstdlib>
#include <string>

#include "core/log.h"

namespace grouped_linear {

bool env_switch(const char* name, bool fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  const std::string value(text);
  for (const char* off : {"0", "off", "OFF", "Off", "false", "False", "FALSE", "no", "No", "NO"})
    if (value == off) return false;
  for (const char* on : {"", "1", "on", "ON", "On", "true", "True", "TRUE", "yes", "Yes", "YES"})
    if (value == on) return true;
  GL_LOG_WARN(name, "='", value,
              "' is neither on (1, on, true, yes) nor off (0, off, false, no); using ",
              fallback ? "on" : "off");
  return fallback;
}

}  // namespace grouped_linear
