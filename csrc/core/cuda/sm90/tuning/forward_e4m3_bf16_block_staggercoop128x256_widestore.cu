#include "core/cuda/sm90/block_half_promotion_mainloop.cuh"

// Candidate: the blockwise forward on 128x256 tiles with the two consumer
// warpgroups taking turns at the tensor cores (against
// forward_e4m3_bf16_block_coop128x128, CUTLASS's mainloop on 128x128).
GL_SM90_KERNEL_AB(forward_e4m3_bf16_block_staggercoop128x256_widestore, kForward,
                  cutlass::float_e4m3_t, cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  Fp8BlockStaggeredCoop128x256WideStore)
