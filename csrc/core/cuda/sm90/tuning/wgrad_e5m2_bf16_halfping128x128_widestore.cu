#include "core/cuda/sm90/half_promotion_mainloop.cuh"

// The promoting FP8 wgrad (half-width promotion) on a 128x128 pingpong tile,
// reading no C operand: one warpgroup's store overlaps the other's MMAs. Its
// store pieces are 64x64, one half-width MMA's rows and columns (CUTLASS's
// epilogue vectorizes a piece over one MMA's fragment), two in flight.
namespace grouped_linear::cuda::sm90 {
struct Fp8HalfPromotionPing128x128WideStore : Fp8HalfPromotionPing128x128 {
  static constexpr bool kReadsSource = false;
  using EpilogueTile = cute::Shape<cute::_64, cute::_64>;
};
}  // namespace grouped_linear::cuda::sm90

GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_halfping128x128_widestore, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8HalfPromotionPing128x128WideStore)
