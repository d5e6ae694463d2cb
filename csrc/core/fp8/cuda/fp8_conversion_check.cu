// The exhaustive check behind fp8_conversion_mismatches: every float bit
// pattern through the kernels' conversions (single and paired) and through
// to_fp8.
#include <cuda_runtime.h>

#include "core/cuda/cuda_check.h"
#include "core/fp8/cuda/fp8_device.cuh"
#include "core/fp8/cuda/quantize_ops_cuda.h"

namespace grouped_linear::fp8::cuda_impl {
namespace {

__global__ void count_mismatches_kernel(Format format, unsigned long long* count) {
  unsigned long long local = 0;
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < (uint64_t{1} << 32); i += step) {
    const float x = bits_float(static_cast<uint32_t>(i));
    local += device_to_fp8(x, format) != to_fp8(x, format);
    // The paired conversion, x in one byte and another pattern in the other
    // (NaNs are not its inputs).
    const float y = bits_float(static_cast<uint32_t>(i) * 2654435761u);
    if (!is_nan(x) && !is_nan(y)) {
      const uint32_t pair = device_to_fp8x2(x, y, format);
      local += (pair & 0xFFu) != to_fp8(x, format);
      local += (pair >> 8) != to_fp8(y, format);
    }
  }
  if (local != 0) atomicAdd(count, local);
}

}  // namespace

unsigned long long fp8_conversion_mismatches(Format format) {
  unsigned long long* count = nullptr;
  GL_CUDA_CHECK(cudaMalloc(&count, sizeof(*count)));
  GL_CUDA_CHECK(cudaMemset(count, 0, sizeof(*count)));
  count_mismatches_kernel<<<4096, 256>>>(format, count);
  GL_CUDA_CHECK_LAUNCH();
  unsigned long long host = 0;
  GL_CUDA_CHECK(cudaMemcpy(&host, count, sizeof(host), cudaMemcpyDeviceToHost));
  GL_CUDA_CHECK(cudaFree(count));
  return host;
}

}  // namespace grouped_linear::fp8::cuda_impl
