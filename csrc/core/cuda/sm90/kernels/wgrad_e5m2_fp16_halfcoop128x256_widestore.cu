#include "core/cuda/sm90/half_promotion_mainloop.cuh"

// wgrad_e5m2_bf16_halfcoop128x256_widestore with an fp16 output, for fp16 weights.
GL_SM90_KERNEL_AB(wgrad_e5m2_fp16_halfcoop128x256_widestore, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::half_t, Fp8HalfPromotionCoop128x256WideStore)
