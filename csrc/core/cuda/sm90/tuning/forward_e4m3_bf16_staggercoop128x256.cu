#include "core/cuda/sm90/half_promotion_mainloop.cuh"

// Candidate: the production promoting E4M3 forward with its warpgroups
// taking turns at the tensor cores (tensor_core_turns.cuh), as the
// blockwise forward does; the same bits (against
// forward_e4m3_bf16_halfcoop128x256).
GL_SM90_KERNEL_AB(forward_e4m3_bf16_staggercoop128x256, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8StaggeredCoop128x256)
