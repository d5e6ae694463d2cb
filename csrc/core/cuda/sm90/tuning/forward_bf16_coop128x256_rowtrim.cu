#include "core/cuda/sm90/kernel_configs.cuh"
#include "core/cuda/sm90/row_trimmed_mainloop.cuh"

// Candidate: the bf16 forward without the MMAs of rows past each group's end
// (row_trimmed_mainloop.cuh), for routed groups' partly filled last tiles.
GL_SM90_KERNEL_AB(forward_bf16_coop128x256_rowtrim, kForward, cutlass::bfloat16_t,
                  cutlass::bfloat16_t, cutlass::bfloat16_t, RowTrimmedConfig<Coop128x256>)
