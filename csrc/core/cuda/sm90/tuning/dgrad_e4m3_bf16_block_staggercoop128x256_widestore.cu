#include "core/cuda/sm90/block_half_promotion_mainloop.cuh"

// Candidate: the blockwise E4M3 dgrad on the production blockwise forward's
// kernel (128x256, warpgroups taking turns, wide store), against
// dgrad_e4m3_bf16_block_coop128x128 (CUTLASS's mainloop on 128x128).
GL_SM90_KERNEL_AB(dgrad_e4m3_bf16_block_staggercoop128x256_widestore, kDgrad, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8BlockStaggeredCoop128x256WideStore)
