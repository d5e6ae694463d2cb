#include "core/cuda/sm90/half_promotion_mainloop.cuh"

// dgrad_e5m2_bf16_halfcoop128x256 with an fp32 output, for layers whose activations are fp32.
GL_SM90_KERNEL_AB(dgrad_e5m2_fp32_halfcoop128x256, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, float, Fp8HalfPromotionCoop128x256)
