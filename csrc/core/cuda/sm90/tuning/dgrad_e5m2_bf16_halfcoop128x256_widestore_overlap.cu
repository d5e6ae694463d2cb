#include "core/cuda/sm90/half_promotion_mainloop.cuh"
#include "core/cuda/sm90/overlapped_switch_epilogue.cuh"

// Candidate: the promoting E5M2 dgrad with the wide store and the
// overlapped group switch, as forward_e4m3_bf16_halfcoop128x256_widestore_overlap.
GL_SM90_KERNEL_AB(dgrad_e5m2_bf16_halfcoop128x256_widestore_overlap, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  OverlappedSwitch<Fp8HalfPromotionCoop128x256WideStore>)
