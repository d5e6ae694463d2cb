#include "core/cuda/sm90/block_half_promotion_mainloop.cuh"

// Reference: wgrad_e4m3_bf16_block_halfcoop128x256_widestore reading the
// activations' scales K-major, their layout before they became block-major
// (BlockScaleLayouts).
GL_SM90_KERNEL_AB(wgrad_e4m3_bf16_block_kmhalfcoop128x256_widestore, kWgrad, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  KMajorScalesConfig<Fp8BlockHalfPromotionCoop128x256WideStore>)
