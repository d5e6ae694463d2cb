// Per-device facts read once (compute capability, SM count) and cached, so a
// call never queries the driver on the hot path.
#pragma once

namespace grouped_linear::cuda {

struct DeviceInfo {
  int major = 0;
  int minor = 0;
  int sm_count = 0;
  bool cooperative_launch = false;  // grids whose CTAs are all resident at once
};

const DeviceInfo& device_info(int device);

}  // namespace grouped_linear::cuda
