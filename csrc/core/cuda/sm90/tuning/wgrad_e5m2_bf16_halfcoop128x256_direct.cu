#include "core/cuda/sm90/direct_store_epilogue.cuh"
#include "core/cuda/sm90/half_promotion_mainloop.cuh"

// The production promoting E5M2 wgrad (half-width promotion, 128x256) with
// the direct store: no staging, the next tile's MMAs start at once.
GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_halfcoop128x256_direct, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  DirectStoreConfig<Fp8HalfPromotionCoop128x256>)
