#include "core/cuda/sm90/half_promotion_mainloop.cuh"

// The promoting E5M2 wgrad (half-width promotion, 128x256) with a wide
// store, like the fast wgrad's (WideStoreConfig, kernel_configs.cuh): the
// tile leaves as two 128x128 pieces, one per half-width MMA (a 128x256
// piece does not match the accumulator's fragments), instead of eight
// 128x32, and reads no C operand: beta = 0 only, never into main_grad.
namespace grouped_linear::cuda::sm90 {
struct Fp8HalfPromotionCoop128x256WideStore : Fp8HalfPromotionCoop128x256 {
  static constexpr bool kReadsSource = false;
  using EpilogueTile = cute::Shape<cute::_128, cute::_128>;
};
}  // namespace grouped_linear::cuda::sm90

GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_halfcoop128x256_widestore, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8HalfPromotionCoop128x256WideStore)
