#include "core/cuda/sm90/block_half_promotion_mainloop.cuh"

// Candidate: the production blockwise forward's turns with the default
// store, whose smaller staging leaves a deeper mainloop pipeline (against
// forward_e4m3_bf16_block_staggercoop128x256_widestore).
GL_SM90_KERNEL_AB(forward_e4m3_bf16_block_staggercoop128x256, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8BlockStaggeredCoop128x256)
