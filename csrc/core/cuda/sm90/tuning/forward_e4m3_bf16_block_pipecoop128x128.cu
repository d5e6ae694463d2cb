#include "core/cuda/sm90/block_pipelined_promotion_mainloop.cuh"

// Candidate: the blockwise-scaled forward with each k-block's MMAs issued
// before the previous k-block's sums are scaled (against
// forward_e4m3_bf16_block_coop128x128, CUTLASS's mainloop on the same tile).
GL_SM90_KERNEL_AB(forward_e4m3_bf16_block_pipecoop128x128, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8BlockPipelinedCoop128x128)
