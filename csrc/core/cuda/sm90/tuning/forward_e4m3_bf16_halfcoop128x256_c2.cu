#include "core/cuda/sm90/half_promotion_mainloop.cuh"
#include "core/cuda/sm90/tuning/cluster2_config.cuh"

// Candidate: the promoting E4M3 forward on 2-CTA clusters sharing each expert's weight tile by
// multicast (Cluster2Config).
namespace grouped_linear::cuda::sm90 {
using Fp8HalfPromotionCoop128x256Cluster2 = Cluster2Config<Fp8HalfPromotionCoop128x256>;
}
GL_SM90_KERNEL_AB(forward_e4m3_bf16_halfcoop128x256_c2, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8HalfPromotionCoop128x256Cluster2)
