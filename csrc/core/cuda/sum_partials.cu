#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/sum_partials.h"
#include "core/error.h"

namespace grouped_linear::cuda {
namespace {

template <typename Out>
__device__ __forceinline__ float load_as_float(const Out* p) {
  if constexpr (std::is_same_v<Out, __half>)
    return __half2float(*p);
  else if constexpr (std::is_same_v<Out, __nv_bfloat16>)
    return __bfloat162float(*p);
  else
    return *p;
}

template <typename Out>
__device__ __forceinline__ Out store_from_float(float v) {
  if constexpr (std::is_same_v<Out, __half>)
    return __float2half_rn(v);
  else if constexpr (std::is_same_v<Out, __nv_bfloat16>)
    return __float2bfloat16_rn(v);
  else
    return v;
}

// One thread per kVector consecutive elements of one group's matrix; float4
// loads when `elements` is a multiple of 4 (kVector = 4), else one at a time.
template <typename Out, int kVector>
__global__ void sum_partials_kernel(const float* __restrict__ partials, int groups, int pieces,
                                    int64_t elements, Out* __restrict__ out, bool accumulate) {
  const int64_t vectors = elements / kVector;
  const int64_t total = vectors * groups;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t g = i / vectors, at = (i % vectors) * kVector;
    float sum[kVector];
    for (int v = 0; v < kVector; ++v) sum[v] = 0.f;
    const float* first = partials + g * pieces * elements + at;
    for (int p = 0; p < pieces; ++p) {
      const float* piece = first + p * elements;
      if constexpr (kVector == 4) {
        const float4 f = *reinterpret_cast<const float4*>(piece);
        sum[0] += f.x, sum[1] += f.y, sum[2] += f.z, sum[3] += f.w;
      } else {
        sum[0] += *piece;
      }
    }
    Out* dst = out + g * elements + at;
    for (int v = 0; v < kVector; ++v)
      dst[v] = store_from_float<Out>(accumulate ? load_as_float(dst + v) + sum[v] : sum[v]);
  }
}

template <typename Out>
void launch_typed(const float* partials, int groups, int pieces, int64_t elements, void* out,
                  bool accumulate, cudaStream_t stream) {
  const bool vector4 = elements % 4 == 0;
  const int64_t work = groups * (vector4 ? elements / 4 : elements);
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((work + threads - 1) / threads, 8192));
  if (vector4)
    sum_partials_kernel<Out, 4><<<blocks, threads, 0, stream>>>(partials, groups, pieces, elements,
                                                                static_cast<Out*>(out), accumulate);
  else
    sum_partials_kernel<Out, 1><<<blocks, threads, 0, stream>>>(partials, groups, pieces, elements,
                                                                static_cast<Out*>(out), accumulate);
  GL_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_sum_partials(const float* partials, int groups, int pieces, int64_t elements, void* out,
                         DType out_dtype, bool accumulate, cudaStream_t stream) {
  if (groups <= 0 || elements <= 0) return;
  switch (out_dtype) {
    case DType::kFloat32:
      return launch_typed<float>(partials, groups, pieces, elements, out, accumulate, stream);
    case DType::kFloat16:
      return launch_typed<__half>(partials, groups, pieces, elements, out, accumulate, stream);
    case DType::kBFloat16:
      return launch_typed<__nv_bfloat16>(partials, groups, pieces, elements, out, accumulate,
                                         stream);
    default: GL_CHECK(false, "sum_partials: unsupported output dtype ", dtype_name(out_dtype));
  }
}

}  // namespace grouped_linear::cuda
