#include "core/cuda/device_info.h"

#include <array>
#include <mutex>

#include "core/cuda/cuda_check.h"

namespace grouped_linear::cuda {

const DeviceInfo& device_info(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<DeviceInfo, kMaxDevices> infos;
  static std::array<std::once_flag, kMaxDevices> once;
  GL_CHECK(device >= 0 && device < kMaxDevices, "device index ", device, " is out of range");
  std::call_once(once[device], [device] {
    DeviceInfo& info = infos[device];
    GL_CUDA_CHECK(cudaDeviceGetAttribute(&info.major, cudaDevAttrComputeCapabilityMajor, device));
    GL_CUDA_CHECK(cudaDeviceGetAttribute(&info.minor, cudaDevAttrComputeCapabilityMinor, device));
    GL_CUDA_CHECK(cudaDeviceGetAttribute(&info.sm_count, cudaDevAttrMultiProcessorCount, device));
    int cooperative = 0;
    GL_CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
    info.cooperative_launch = cooperative != 0;
  });
  return infos[device];
}

}  // namespace grouped_linear::cuda
