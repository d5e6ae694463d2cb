#include "core/cuda/sm90/block_half_promotion_mainloop.cuh"

// The blockwise-scaled forward on 128x256 tiles, the two consumer warpgroups
// taking turns at the tensor cores (tensor_core_turns.cuh): one scales its
// k-block's sums while the other's MMAs run. Without the turns this tile
// lost to CUTLASS's 128x128; with them it wins where groups average under
// 1024 rows (kernel_entries.h).
GL_SM90_KERNEL_AB(forward_e4m3_bf16_block_staggercoop128x256_widestore, kForward,
                  cutlass::float_e4m3_t, cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  Fp8BlockStaggeredCoop128x256WideStore)
