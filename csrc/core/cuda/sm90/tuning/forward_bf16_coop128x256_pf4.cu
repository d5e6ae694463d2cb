#include "core/cuda/sm90/tuning/l2_prefetch_load.cuh"

// Candidate: forward_bf16_coop128x256_pf4 (l2_prefetch_load.cuh).
GL_SM90_KERNEL_AB(forward_bf16_coop128x256_pf4, kForward, cutlass::bfloat16_t, cutlass::bfloat16_t,
                  cutlass::bfloat16_t, Coop128x256Pf4)
