#include "core/cuda/sm90/half_promotion_mainloop.cuh"

// Candidate: the production promoting E5M2 dgrad with its warpgroups taking
// turns at the tensor cores; the same bits (against
// dgrad_e5m2_bf16_halfcoop128x256).
GL_SM90_KERNEL_AB(dgrad_e5m2_bf16_staggercoop128x256, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8StaggeredCoop128x256)
