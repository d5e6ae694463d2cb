#include "core/cuda/sm90/kernel_configs.cuh"

// Reference: dgrad_e4m3_bf16_block_coop128x128 reading the activations'
// scales K-major, their layout before they became block-major
// (BlockScaleLayouts).
GL_SM90_KERNEL_AB(dgrad_e4m3_bf16_block_kmcoop128x128, kDgrad, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  KMajorScalesConfig<Fp8BlockCoop128x128>)
