#include "core/cuda/sm90/pipelined_promotion_mainloop.cuh"

// The promoting E5M2 dgrad on 128x256 with each k-block's promotion adds
// overlapping its next quarter's MMAs (pipelined_promotion_mainloop.cuh),
// against the production half-width promotion.
GL_SM90_KERNEL_AB(dgrad_e5m2_bf16_pipecoop128x256, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8PipelinedPromotionCoop128x256)
