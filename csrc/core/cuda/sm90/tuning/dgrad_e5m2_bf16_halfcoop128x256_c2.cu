#include "core/cuda/sm90/half_promotion_mainloop.cuh"
#include "core/cuda/sm90/tuning/cluster2_config.cuh"

// Candidate: the promoting E5M2 dgrad on 2-CTA clusters sharing each expert's weight tile by
// multicast (Cluster2Config).
namespace grouped_linear::cuda::sm90 {
using Fp8HalfPromotionCoop128x256Cluster2 = Cluster2Config<Fp8HalfPromotionCoop128x256>;
}
GL_SM90_KERNEL_AB(dgrad_e5m2_bf16_halfcoop128x256_c2, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8HalfPromotionCoop128x256Cluster2)
