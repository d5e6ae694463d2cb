// NVTX ranges around the library's products and FP8 casts, for Nsight
// Systems. Switched on by GROUPED_LINEAR_NVTX=1 (read once, on first use);
// compiled in only in CUDA builds that found the header-only NVTX3
// (`nvtx3/nvToolsExt.h` of the CUDA toolkit or the nvidia-nvtx wheel), see
// cmake/nvtx.cmake. When off, a range costs one predictable branch.
//
//   nvtx::Range range("grouped_linear.forward");
#pragma once

namespace grouped_linear::nvtx {

// Whether this build has NVTX (false in CPU builds and without the header).
bool compiled_in();

// GROUPED_LINEAR_NVTX is set to 1/true/on and the build has NVTX. Setting
// the variable in a build without NVTX logs one warning.
bool enabled_from_env();

inline bool enabled() {
  static const bool value = enabled_from_env();
  return value;
}

void push(const char* name);
void pop();

class Range {
 public:
  explicit Range(const char* name) : active_(enabled()) {
    if (active_) push(name);
  }
  ~Range() {
    if (active_) pop();
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  bool active_;
};

}  // namespace grouped_linear::nvtx
