#include "core/cuda/sm90/half_promotion_mainloop.cuh"

// The promoting E5M2 wgrad into a float32 main_grad on bf16's 128x256 tile, each k-block
// promoted per N-half (half_promotion_mainloop.cuh).
GL_SM90_KERNEL_AB(wgrad_e5m2_to_fp32_halfcoop128x256, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, float, Fp8HalfPromotionCoop128x256)
