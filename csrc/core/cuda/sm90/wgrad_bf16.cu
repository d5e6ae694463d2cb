#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {

KernelEntry wgrad_bf16() {
  return GroupedGemmRunner<Role::kWgrad, cutlass::bfloat16_t, cutlass::bfloat16_t, WgradConfig>::entry();
}

}  // namespace grouped_linear::cuda::sm90
