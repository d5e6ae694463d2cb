#include "core/cuda/stream_resources.h"

#include <memory>
#include <vector>

#include "core/cuda/cuda_check.h"

namespace grouped_linear::cuda {
namespace {

// Entries are never destroyed: their memory belongs to the framework's
// allocator, which may already be gone when thread-local destructors run at
// exit. A handful per (thread, device, stream) is a bounded cost.
std::vector<std::unique_ptr<StreamResources>>& table() {
  thread_local std::vector<std::unique_ptr<StreamResources>>* entries =
      new std::vector<std::unique_ptr<StreamResources>>();
  return *entries;
}

}  // namespace

StreamResources& stream_resources(int device, cudaStream_t stream, DeviceAllocator* allocator) {
  auto& entries = table();
  for (auto& entry : entries)
    if (entry->device == device && entry->stream == stream) return *entry;

  GL_CHECK(allocator != nullptr, "no device allocator was given for the cuBLAS workspace");
  auto entry = std::make_unique<StreamResources>();
  entry->device = device;
  entry->stream = stream;
  GL_CUBLAS_CHECK(cublasCreate(&entry->cublas));
  GL_CUBLAS_CHECK(cublasSetStream(entry->cublas, stream));
  // fp32 GEMMs stay true fp32 (no TF32), as torch's matmul does by default.
  GL_CUBLAS_CHECK(cublasSetMathMode(entry->cublas, CUBLAS_DEFAULT_MATH));
  entry->workspace_bytes = kCublasWorkspaceBytes;
  entry->workspace = allocator->allocate(entry->workspace_bytes, device, stream);
  GL_CUBLAS_CHECK(cublasSetWorkspace(entry->cublas, entry->workspace, entry->workspace_bytes));
  entries.push_back(std::move(entry));
  return *entries.back();
}

size_t stream_resources_count() { return table().size(); }

}  // namespace grouped_linear::cuda
