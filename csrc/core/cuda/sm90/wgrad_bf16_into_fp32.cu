#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {

KernelEntry wgrad_bf16_into_fp32() {
  return GroupedGemmRunner<Role::kWgrad, cutlass::bfloat16_t, float, WgradConfig>::entry();
}

}  // namespace grouped_linear::cuda::sm90
