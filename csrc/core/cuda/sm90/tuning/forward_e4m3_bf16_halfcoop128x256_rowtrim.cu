#include "core/cuda/sm90/half_promotion_mainloop.cuh"
#include "core/cuda/sm90/row_trimmed_mainloop.cuh"

// Candidate: the promoting E4M3 forward without the MMAs of rows past each group's end
// (row_trimmed_mainloop.cuh), for routed groups' partly filled last tiles.
GL_SM90_KERNEL_AB(forward_e4m3_bf16_halfcoop128x256_rowtrim, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  RowTrimmedConfig<Fp8HalfPromotionCoop128x256>)
