#include "core/cuda/sm90/half_promotion_mainloop.cuh"
#include "core/cuda/sm90/row_trimmed_mainloop.cuh"

// Candidate: the promoting E5M2 dgrad without the MMAs of rows past each group's end
// (row_trimmed_mainloop.cuh), for routed groups' partly filled last tiles.
GL_SM90_KERNEL_AB(dgrad_e5m2_bf16_halfcoop128x256_rowtrim, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  RowTrimmedConfig<Fp8HalfPromotionCoop128x256>)
