#include "core/cuda/sm90/tuning/block_pingpong_config.cuh"

// Candidate: the blockwise forward on 64x128 pingpong tiles
// (block_pingpong_config.cuh), against the production 128x128 cooperative tile.
GL_SM90_KERNEL_AB(forward_e4m3_bf16_block_ping64x128, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8BlockPing64x128)
