#include "core/cuda/sm90/tuning/l2_prefetch_load.cuh"

// Candidate: forward_e4m3_bf16_halfcoop128x256_pf8 (l2_prefetch_load.cuh).
GL_SM90_KERNEL_AB(forward_e4m3_bf16_halfcoop128x256_pf8, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8HalfPromotionCoop128x256Pf8)
