#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {

KernelEntry forward_fp16() {
  return GroupedGemmRunner<Role::kForward, cutlass::half_t, cutlass::half_t, ForwardConfig>::entry();
}

}  // namespace grouped_linear::cuda::sm90
