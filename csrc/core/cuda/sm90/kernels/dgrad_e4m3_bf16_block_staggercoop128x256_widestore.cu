#include "core/cuda/sm90/block_half_promotion_mainloop.cuh"

// The blockwise-scaled E4M3 dgrad on the blockwise forward's kernel: 128x256
// tiles, the two consumer warpgroups taking turns at the tensor cores
// (tensor_core_turns.cuh), the wide store. For groups averaging under 1024
// rows (kernel_entries.h).
GL_SM90_KERNEL_AB(dgrad_e4m3_bf16_block_staggercoop128x256_widestore, kDgrad, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8BlockStaggeredCoop128x256WideStore)
