#include "core/fp8/cuda/launch_util.h"

#include <mutex>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_info.h"

namespace grouped_linear::fp8::cuda_impl {

CallWorkspace::CallWorkspace(const ExecContext& ctx) : ctx_(ctx) {
  GL_CHECK(ctx.allocator != nullptr, "FP8 quantization on CUDA needs a device allocator");
}

CallWorkspace::~CallWorkspace() {
  for (void* block : blocks_) ctx_.allocator->deallocate(block);
}

void* CallWorkspace::allocate(size_t bytes) {
  void* block = ctx_.allocator->allocate(bytes < 256 ? 256 : bytes, ctx_.device.index, ctx_.stream);
  blocks_.push_back(block);
  return block;
}

int device_wide_ctas(const void* kernel, int threads, size_t smem, int device) {
  struct Entry {
    const void* kernel;
    int device;
    size_t smem;
    int ctas;
  };
  static std::mutex mutex;
  static std::vector<Entry> cache;  // few entries: kernels x group counts seen
  std::lock_guard<std::mutex> lock(mutex);
  for (const Entry& e : cache)
    if (e.kernel == kernel && e.device == device && e.smem == smem) return e.ctas;
  // The opt-in limit covers static and dynamic shared memory together.
  int optin = 0;
  GL_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  GL_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  const size_t dynamic_limit = static_cast<size_t>(optin) - attributes.sharedSizeBytes;
  GL_CHECK_VALUE(smem <= dynamic_limit, "FP8 quantization: a kernel needs ", smem,
                 " bytes of shared memory (the group count sets most of it), the device allows ",
                 dynamic_limit);
  bool opted_in = false;  // set once per kernel and device, to the maximum
  for (const Entry& e : cache) opted_in |= e.kernel == kernel && e.device == device;
  if (!opted_in)
    GL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(dynamic_limit)));
  int per_sm = 0;
  GL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  const int ctas = (per_sm > 0 ? per_sm : 1) * cuda::device_info(device).sm_count;
  if (cache.size() > 512) cache.clear();
  cache.push_back(Entry{kernel, device, smem, ctas});
  return ctas;
}

}  // namespace grouped_linear::fp8::cuda_impl
