#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {
// A candidate's tile, kept here until it wins: 64x192 per warpgroup is 96
// accumulator registers a thread, 192 with the promotion copy, under the
// 232 a cooperative consumer gets (128x256 would need 256 and spill).
using Fp8Coop128x192 = TileConfig<128, 192, 128, 1, true>;
}  // namespace grouped_linear::cuda::sm90

GL_SM90_KERNEL_AB(dgrad_e5m2_bf16_coop128x192, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8Coop128x192)
