#include "core/cuda/sm90/half_promotion_mainloop.cuh"

// The promoting E5M2 wgrad (half-width promotion, 128x256) with a wide
// store, like the fast wgrad's (WideStoreConfig, kernel_configs.cuh): the
// tile leaves as two 128x128 pieces, one per half-width MMA, instead of
// eight 128x32, and reads no C operand: beta = 0 only, never into main_grad.
GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_halfcoop128x256_widestore, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8HalfPromotionCoop128x256WideStore)
