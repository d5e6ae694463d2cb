#include "core/cuda/sm90/half_promotion_mainloop.cuh"
#include "core/cuda/sm90/overlapped_switch_epilogue.cuh"

// Candidate: the promoting E4M3 forward with the wide store whose group
// switches do not wait for the previous tile's stores
// (overlapped_switch_epilogue.cuh). At 32-128 experts a CTA's next tile is
// nearly always in another group (qwen3: 12 tiles a group, every 132nd tile
// a CTA's), so every tile's MMAs waited for the last tile's store to leave
// shared memory; the same change gave the wgrads +0.04..+0.06 of dense at
// qwen3.
GL_SM90_KERNEL_AB(forward_e4m3_bf16_halfcoop128x256_widestore_overlap, kForward,
                  cutlass::float_e4m3_t, cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  OverlappedSwitch<Fp8HalfPromotionCoop128x256WideStore>)
