#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {
// 128x128 pieces, both staged (CUTLASS stages min(pieces, 2)): one 128x256
// piece takes the same 64 KiB as a single buffer, so a tile's store would
// wait for the previous tile's to leave shared memory.
using Coop128x256WideStore = WideStoreConfig<Coop128x256, 128>;
}  // namespace grouped_linear::cuda::sm90

// Candidate: bf16's forward with the wide store, to tell whether the
// forward's stores cost the 32-128 expert cases (0.75-0.85 of dense) as much
// as they cost wgrad.
GL_SM90_KERNEL(forward_bf16_coop128x256_widestore, kForward, cutlass::bfloat16_t,
               cutlass::bfloat16_t, Coop128x256WideStore)
