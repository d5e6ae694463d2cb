#include "core/cuda/sm90/grouped_gemm_sm90.h"
#include "core/cuda/sm90/kernel_entries.h"

namespace grouped_linear::cuda::sm90 {

KernelEntry find_kernel(Role role, DType input, DType output) {
  const bool bf16 = input == DType::kBFloat16, fp16 = input == DType::kFloat16;
  if (!bf16 && !fp16) return {};
  switch (role) {
    case Role::kForward:
      if (output == input) return bf16 ? forward_bf16() : forward_fp16();
      return {};
    case Role::kDgrad:
      if (output == input) return bf16 ? dgrad_bf16() : dgrad_fp16();
      return {};
    case Role::kWgrad:
      if (output == input) return bf16 ? wgrad_bf16() : wgrad_fp16();
      if (output == DType::kFloat32) return bf16 ? wgrad_bf16_into_fp32() : wgrad_fp16_into_fp32();
      return {};
  }
  return {};
}

}  // namespace grouped_linear::cuda::sm90
