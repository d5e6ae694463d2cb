#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {

KernelEntry wgrad_fp16_into_fp32() {
  return GroupedGemmRunner<Role::kWgrad, cutlass::half_t, float, WgradConfig>::entry();
}

}  // namespace grouped_linear::cuda::sm90
