#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {

KernelEntry wgrad_fp16() {
  return GroupedGemmRunner<Role::kWgrad, cutlass::half_t, cutlass::half_t, WgradConfig>::entry();
}

}  // namespace grouped_linear::cuda::sm90
