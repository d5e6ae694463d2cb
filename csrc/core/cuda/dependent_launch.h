// Programmatic dependent launch (Hopper and later) for the hot path's
// kernels: the casts and the grouped GEMMs.
//
// A kernel launched with the attribute below may start before the kernel
// ahead of it in the stream has finished: once every CTA of that kernel has
// exited, the next grid is launched, instead of after the whole grid's writes
// have been flushed and the launch has gone round again (about 1 µs a kernel
// boundary on an H100). Such a kernel must call
// wait_for_prior_grids() before its first global-memory access: that waits
// for the grids ahead of it to complete and their writes to be visible, so
// results are those of plain stream order. Kernels launched without the
// attribute are unaffected by the wait.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "core/cuda/cuda_check.h"

namespace grouped_linear::cuda {

// The process-wide switch: on unless GROUPED_LINEAR_DEPENDENT_LAUNCH is
// 0/off/false/no (read once); set_dependent_launch overrides it (tests and
// A/B timing).
bool dependent_launch();
void set_dependent_launch(bool enabled);

// Fills `attribute` for a launch on `device` and returns how many attributes
// it filled: 1 where the switch is on and the device is sm_90 or newer, else 0.
int dependent_launch_attribute(int device, cudaLaunchAttribute* attribute);

#if defined(__CUDACC__)
// First statement of a kernel launched with the attribute.
__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The start of every kernel launched with the attribute. It signals nothing
// itself: the next kernel is launched as this grid's CTAs exit (the implicit
// signal), so its CTAs land on the SMs as a plain launch would place them,
// with the launch's latency and the memory flush overlapped. (Signalling
// right after the wait, so that the next grid's CTAs took SMs as this one's
// drained, cost the forward+backward chains up to 2.9 us a call on an H100.)
__device__ __forceinline__ void enter_dependent_grid() { wait_for_prior_grids(); }

// Launches `kernel`, whose first statement is enter_dependent_grid(), with
// the attribute where it applies; checks the launch.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, int device, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  config.numAttrs = static_cast<unsigned>(dependent_launch_attribute(device, &attribute));
  config.attrs = config.numAttrs > 0 ? &attribute : nullptr;
  GL_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}
#endif

}  // namespace grouped_linear::cuda
