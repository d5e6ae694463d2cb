#include "core/cuda/sm90/half_promotion_mainloop.cuh"

// Candidate: the promoting E5M2 dgrad with the wide store, for the same
// reason as forward_e4m3_bf16_halfcoop128x256_widestore. It reads no C
// operand, so it never accumulates into an existing gradient.
GL_SM90_KERNEL_AB(dgrad_e5m2_bf16_halfcoop128x256_widestore, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8HalfPromotionCoop128x256WideStore)
