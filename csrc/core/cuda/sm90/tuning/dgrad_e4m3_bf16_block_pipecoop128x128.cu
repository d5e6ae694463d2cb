#include "core/cuda/sm90/block_pipelined_promotion_mainloop.cuh"

// Candidate: the blockwise-scaled dgrad (Float8BlockScaling's E4M3 dY) with
// the pipelined promotion (against dgrad_e4m3_bf16_block_coop128x128).
GL_SM90_KERNEL_AB(dgrad_e4m3_bf16_block_pipecoop128x128, kDgrad, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8BlockPipelinedCoop128x128)
