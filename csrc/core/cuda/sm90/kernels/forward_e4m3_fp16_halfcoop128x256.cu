#include "core/cuda/sm90/half_promotion_mainloop.cuh"

// forward_e4m3_bf16_halfcoop128x256 with an fp16 output, for layers whose activations are fp16.
GL_SM90_KERNEL_AB(forward_e4m3_fp16_halfcoop128x256, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::half_t, Fp8HalfPromotionCoop128x256)
