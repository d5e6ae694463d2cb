// Which engine runs a problem. Engines register per device type; the first
// registered that is available on the device is its default, and a caller
// (tests, the benchmark) may ask for one by name.
#pragma once

#include <string>
#include <vector>

#include "core/grouped_gemm.h"

namespace grouped_linear {

void register_engine(DeviceType device_type, GroupedGemmEngine* engine);

// The engine for `device`: the one named by `requested` when not empty, else
// the override set by set_engine_override, else the default. Throws when none
// fits.
GroupedGemmEngine& engine_for(const Device& device, const std::string& requested = "");

// Process-wide override by name ("" clears it): lets tests pin an engine.
void set_engine_override(DeviceType device_type, const std::string& name);

std::vector<std::string> engine_names(DeviceType device_type);

// A registered engine by name, available on the device or not (to list or
// pin its kernels). Throws when none has that name.
GroupedGemmEngine& engine_by_name(DeviceType device_type, const std::string& name);

}  // namespace grouped_linear
