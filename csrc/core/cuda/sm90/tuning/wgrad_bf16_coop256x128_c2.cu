#include "core/cuda/sm90/kernel_configs.cuh"

// The production bf16 wgrad (256x128) in clusters of two CTAs along M, which
// multicast their shared B tile (see wgrad_e5m2_bf16_coop128x192_c2.cu).
namespace grouped_linear::cuda::sm90 {
using Coop256x128Cluster2 = TileConfig<256, 128, 64, 2, true>;
}

GL_SM90_KERNEL(wgrad_bf16_coop256x128_c2, kWgrad, cutlass::bfloat16_t, cutlass::bfloat16_t,
               Coop256x128Cluster2)
