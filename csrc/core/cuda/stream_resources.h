// Per-(device, stream) resources: a cuBLAS handle bound to the stream and its
// workspace. Created once, through the caller's allocator, then found again by
// a short linear scan; nothing is allocated on the hot path after the first
// call on a stream.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/allocator.h"

namespace grouped_linear::cuda {

struct StreamResources {
  int device = -1;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// cuBLAS asks for up to 32 MiB on Hopper for its fastest kernels.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

// Handles are not safe to share between threads, so each thread keeps its own
// table; a workspace is tied to one stream, so two streams never share one
// while both are in flight.
StreamResources& stream_resources(int device, cudaStream_t stream, DeviceAllocator* allocator);

// How many (device, stream) entries this thread has created (for tests).
size_t stream_resources_count();

}  // namespace grouped_linear::cuda
