#include "core/cuda/sm90/direct_store_epilogue.cuh"
#include "core/cuda/sm90/half_promotion_mainloop.cuh"

namespace grouped_linear::cuda::sm90 {
// Reads C: also accumulates into a float32 main_grad.
using Fp8HalfPromotionCoop128x256DirectAccumulate =
    DirectStoreConfig<Fp8HalfPromotionCoop128x256, /*ReadsSource=*/true>;
}  // namespace grouped_linear::cuda::sm90

// The promoting E5M2 wgrad into float32 (and main_grad) with the direct store.
GL_SM90_KERNEL_AB(wgrad_e5m2_to_fp32_halfcoop128x256_direct, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, float, Fp8HalfPromotionCoop128x256DirectAccumulate)
