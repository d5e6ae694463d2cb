#include "core/cuda/sm90/tuning/cluster2_config.cuh"

// Candidate: the fast-accumulation E5M2 dgrad on 2-CTA clusters sharing each expert's weight tile
// by multicast (Cluster2Config).
namespace grouped_linear::cuda::sm90 {
using Fp8FastCoop128x256Cluster2 = Cluster2Config<Fp8FastCoop128x256>;
}
GL_SM90_KERNEL_AB(dgrad_e5m2_bf16_fastcoop128x256_c2, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8FastCoop128x256Cluster2)
