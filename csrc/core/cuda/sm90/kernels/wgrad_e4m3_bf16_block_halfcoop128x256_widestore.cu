#include "core/cuda/sm90/block_half_promotion_mainloop.cuh"

// The blockwise-scaled wgrad (E4M3 dY, Float8BlockScaling's default format)
// on 128x256 tiles, its per-column scales read from shared memory, with the
// wide store of the production wgrads (two 128x128 pieces, beta = 0 only).
GL_SM90_KERNEL_AB(wgrad_e4m3_bf16_block_halfcoop128x256_widestore, kWgrad, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  Fp8BlockHalfPromotionCoop128x256WideStore)
