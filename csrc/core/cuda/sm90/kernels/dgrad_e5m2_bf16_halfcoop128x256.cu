#include "core/cuda/sm90/half_promotion_mainloop.cuh"

// The promoting E5M2 dgrad on bf16's 128x256 tile, each k-block
// promoted per N-half (half_promotion_mainloop.cuh).
GL_SM90_KERNEL_AB(dgrad_e5m2_bf16_halfcoop128x256, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8HalfPromotionCoop128x256)
