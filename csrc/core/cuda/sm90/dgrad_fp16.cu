#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {

KernelEntry dgrad_fp16() {
  return GroupedGemmRunner<Role::kDgrad, cutlass::half_t, cutlass::half_t, DgradConfig>::entry();
}

}  // namespace grouped_linear::cuda::sm90
