#include "core/cuda/sm90/kernel_configs.cuh"
#include "core/cuda/sm90/row_trimmed_mainloop.cuh"

// Candidate: the bf16 dgrad without the MMAs of rows past each group's end
// (row_trimmed_mainloop.cuh), for routed groups' partly filled last tiles.
GL_SM90_KERNEL_AB(dgrad_bf16_coop128x256_rowtrim, kDgrad, cutlass::bfloat16_t, cutlass::bfloat16_t,
                  cutlass::bfloat16_t, RowTrimmedConfig<Coop128x256>)
