#include "core/cuda/sm90/kernel_configs.cuh"

// The production promoting E5M2 wgrad (128x192) in clusters of two CTAs along
// M, which multicast their shared B tile (X^T, 192 rows a k-block): at the
// short reductions of 32-128 experts every input element is read from L2
// once per output tile (about 3 GB at dsv3 fc1), and this halves B's share.
namespace grouped_linear::cuda::sm90 {
using Fp8Coop128x192Cluster2 = TileConfig<128, 192, 128, 2, true>;
}

GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_coop128x192_c2, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8Coop128x192Cluster2)
