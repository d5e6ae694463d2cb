#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {

KernelEntry forward_bf16() {
  return GroupedGemmRunner<Role::kForward, cutlass::bfloat16_t, cutlass::bfloat16_t, ForwardConfig>::entry();
}

}  // namespace grouped_linear::cuda::sm90
