#include "core/cuda/sm90/half_promotion_mainloop.cuh"
#include "core/cuda/sm90/overlapped_switch_epilogue.cuh"

// Candidate: the promoting FP8 wgrad with the two consumer warpgroups
// taking turns at the tensor cores (tensor_core_turns.cuh), against
// wgrad_e5m2_bf16_halfcoop128x256_widestore_overlap, the same tile, store
// and group switch. Its promotion is an add an element, less than the
// blockwise one's multiply and FMA, so it has less to gain.
GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_staggercoop128x256_widestore_overlap, kWgrad,
                  cutlass::float_e5m2_t, cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  OverlappedSwitch<Fp8HalfPromotionStaggeredCoop128x256WideStore>)
