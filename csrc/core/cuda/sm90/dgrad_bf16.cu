#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {

KernelEntry dgrad_bf16() {
  return GroupedGemmRunner<Role::kDgrad, cutlass::bfloat16_t, cutlass::bfloat16_t, DgradConfig>::entry();
}

}  // namespace grouped_linear::cuda::sm90
