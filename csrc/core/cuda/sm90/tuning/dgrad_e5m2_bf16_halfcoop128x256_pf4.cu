#include "core/cuda/sm90/tuning/l2_prefetch_load.cuh"

// Candidate: dgrad_e5m2_bf16_halfcoop128x256_pf4 (l2_prefetch_load.cuh).
GL_SM90_KERNEL_AB(dgrad_e5m2_bf16_halfcoop128x256_pf4, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8HalfPromotionCoop128x256Pf4)
