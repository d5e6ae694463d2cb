#include "core/cuda/sm90/block_half_promotion_mainloop.cuh"

GL_SM90_KERNEL_AB(forward_e4m3_bf16_block_halfcoop128x256, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8BlockHalfPromotionCoop128x256)
