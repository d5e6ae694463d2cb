#include "core/cuda/sm90/block_half_promotion_mainloop.cuh"

// Candidate: the blockwise wgrad with the two consumer warpgroups taking
// turns at the tensor cores (against
// wgrad_e4m3_bf16_block_halfcoop128x256_widestore, the same tile and store).
GL_SM90_KERNEL_AB(wgrad_e4m3_bf16_block_staggercoop128x256_widestore, kWgrad, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8BlockStaggeredCoop128x256WideStore)
