// On/off switches read from the environment (GROUPED_LINEAR_*), one spelling
// for all of them.
#pragma once

namespace grouped_linear {

// `name`'s value as a switch: 1/on/true/yes (any case listed in the .cpp, or
// empty) is on, 0/off/false/no is off, unset gives `fallback`; any other
// value logs a warning naming the variable and gives `fallback`. Callers read
// it once and keep the result.
bool env_switch(const char* name, bool fallback);

}  // namespace grouped_linear
