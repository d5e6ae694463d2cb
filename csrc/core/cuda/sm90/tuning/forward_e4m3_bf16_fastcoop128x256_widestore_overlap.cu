#include "core/cuda/sm90/overlapped_switch_epilogue.cuh"

namespace grouped_linear::cuda::sm90 {
using Fp8FastCoop128x256WideStoreOverlap =
    OverlappedSwitch<WideStoreConfig<Fp8FastCoop128x256, 128>>;
}  // namespace grouped_linear::cuda::sm90

// Candidate: the fast-accumulation E4M3 forward with the wide store (two
// 128x128 pieces) and the overlapped group switch, as
// forward_e4m3_bf16_halfcoop128x256_widestore_overlap.
GL_SM90_KERNEL_AB(forward_e4m3_bf16_fastcoop128x256_widestore_overlap, kForward,
                  cutlass::float_e4m3_t, cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  Fp8FastCoop128x256WideStoreOverlap)
