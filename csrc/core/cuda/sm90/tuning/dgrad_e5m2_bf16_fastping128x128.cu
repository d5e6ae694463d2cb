#include "core/cuda/sm90/kernel_configs.cuh"

// Candidate: the fast-accumulation E5M2 dgrad on 128x128 pingpong tiles
// (the forward's candidate of the same name says why).
namespace grouped_linear::cuda::sm90 {
using Fp8FastPing128x128 = Fp8FastAccumTileConfig<128, 128, false>;
}

GL_SM90_KERNEL_AB(dgrad_e5m2_bf16_fastping128x128, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8FastPing128x128)
