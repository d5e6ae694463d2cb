// Built only against a CUDA build of torch (GL_WITH_CUDA).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include "torch_binding/exec_context.h"

namespace grouped_linear::torch_binding {
namespace {

// Workspaces come from torch's caching allocator, so they count in
// torch.cuda.memory_allocated and reuse the framework's pool.
class TorchCudaAllocator final : public DeviceAllocator {
 public:
  void* allocate(size_t bytes, int /*device*/, void* stream) override {
    return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(
        bytes, static_cast<cudaStream_t>(stream));
  }
  void deallocate(void* ptr) override { c10::cuda::CUDACachingAllocator::raw_delete(ptr); }
};

}  // namespace

ExecContext cuda_exec_context(const at::Device& device) {
  static TorchCudaAllocator allocator;
  const c10::DeviceIndex index = device.has_index() ? device.index() : c10::cuda::current_device();
  ExecContext ctx;
  ctx.device = Device{DeviceType::kCUDA, index};
  ctx.stream = c10::cuda::getCurrentCUDAStream(index).stream();
  ctx.allocator = &allocator;
  return ctx;
}

}  // namespace grouped_linear::torch_binding
