#include "core/cuda/sm90/overlapped_switch_epilogue.cuh"

namespace grouped_linear::cuda::sm90 {
using Coop128x256WideStoreOverlap = OverlappedSwitch<WideStoreConfig<Coop128x256, 128>>;
}  // namespace grouped_linear::cuda::sm90

// Candidate: bf16's forward with the wide store (two 128x128 pieces) and the
// overlapped group switch, as forward_e4m3_bf16_halfcoop128x256_widestore_overlap.
GL_SM90_KERNEL(forward_bf16_coop128x256_widestore_overlap, kForward, cutlass::bfloat16_t,
               cutlass::bfloat16_t, Coop128x256WideStoreOverlap)
