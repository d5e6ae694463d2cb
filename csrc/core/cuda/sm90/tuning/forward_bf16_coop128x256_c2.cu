#include "core/cuda/sm90/tuning/cluster2_config.cuh"

// Candidate: the bf16 forward on 2-CTA clusters sharing each expert's weight tile by
// multicast (Cluster2Config).
namespace grouped_linear::cuda::sm90 {
using Coop128x256Cluster2 = Cluster2Config<Coop128x256>;
}
GL_SM90_KERNEL_AB(forward_bf16_coop128x256_c2, kForward, cutlass::bfloat16_t, cutlass::bfloat16_t,
                  cutlass::bfloat16_t, Coop128x256Cluster2)
