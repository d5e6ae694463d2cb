#include "core/cuda/sm90/kernel_configs.cuh"

// The production fast wide-store E5M2 wgrad in clusters of two CTAs along M,
// which multicast their shared B tile (see wgrad_e5m2_bf16_coop128x192_c2.cu).
namespace grouped_linear::cuda::sm90 {
struct Fp8FastCoop256x128Cluster2 : TileConfig<256, 128, 128, 2, true> {
  static constexpr bool kFastAccumulation = true;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum;
};
}  // namespace grouped_linear::cuda::sm90

GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_fastcoop256x128_widestore_c2, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  WideStoreConfig<Fp8FastCoop256x128Cluster2>)
