#include "core/cuda/sm90/half_promotion_mainloop.cuh"

// Candidate: the promoting E4M3 forward with the wgrad's wide store (two
// 128x128 pieces a tile, all in flight, instead of eight 128x32 with two in
// flight). Where K is short (qwen3 fc2: 6 k-tiles a tile) the store of one
// tile is a third of its time and the default epilogue keeps the
// warpgroups waiting on it; whether the shallower mainloop pipeline this
// leaves (3 stages instead of 4) costs more is for `bench.tune_sm90`.
GL_SM90_KERNEL_AB(forward_e4m3_bf16_halfcoop128x256_widestore, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8HalfPromotionCoop128x256WideStore)
