#include "core/cuda/sm90/half_promotion_mainloop.cuh"
#include "core/cuda/sm90/overlapped_switch_epilogue.cuh"

// wgrad_e5m2_bf16_halfcoop128x256_widestore_overlap with an fp16 output, for
// fp16 weights: the same short-reduction choice as bf16's.
GL_SM90_KERNEL_AB(wgrad_e5m2_fp16_halfcoop128x256_widestore_overlap, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::half_t,
                  OverlappedSwitch<Fp8HalfPromotionCoop128x256WideStore>)
