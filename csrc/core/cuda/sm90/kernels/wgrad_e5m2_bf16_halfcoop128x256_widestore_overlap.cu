#include "core/cuda/sm90/half_promotion_mainloop.cuh"
#include "core/cuda/sm90/overlapped_switch_epilogue.cuh"

// The production promoting FP8 wgrad whose group switches do not wait for
// its stores (overlapped_switch_epilogue.cuh).
GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_halfcoop128x256_widestore_overlap, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  OverlappedSwitch<Fp8HalfPromotionCoop128x256WideStore>)
