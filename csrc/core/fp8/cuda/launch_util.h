// Host-side helpers of the FP8 kernels' launches: per-call device memory
// from the caller's allocator, and how many CTAs of a kernel fit on the
// device (cached, with the shared-memory opt-in set once per kernel).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "core/grouped_gemm.h"

namespace grouped_linear::fp8::cuda_impl {

// Device memory for one call, taken from ctx.allocator and given back when
// this goes out of scope, after the launches that use it are queued (the
// caching allocator orders reuse on the stream).
class CallWorkspace {
 public:
  explicit CallWorkspace(const ExecContext& ctx);
  ~CallWorkspace();
  CallWorkspace(const CallWorkspace&) = delete;
  CallWorkspace& operator=(const CallWorkspace&) = delete;
  void* allocate(size_t bytes);

 private:
  const ExecContext& ctx_;
  std::vector<void*> blocks_;
};

// CTAs of `threads` threads and `smem` bytes of dynamic shared memory that
// the whole device runs at once (SMs x resident CTAs per SM, at least 1).
// Throws if `smem` exceeds what the device allows.
int device_wide_ctas(const void* kernel, int threads, size_t smem, int device);

}  // namespace grouped_linear::fp8::cuda_impl
