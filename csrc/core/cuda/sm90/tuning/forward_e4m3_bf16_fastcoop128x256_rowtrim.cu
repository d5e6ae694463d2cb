#include "core/cuda/sm90/kernel_configs.cuh"
#include "core/cuda/sm90/row_trimmed_mainloop.cuh"

// Candidate: the fast-accumulation E4M3 forward without the MMAs of rows past each group's end
// (row_trimmed_mainloop.cuh), for routed groups' partly filled last tiles.
GL_SM90_KERNEL_AB(forward_e4m3_bf16_fastcoop128x256_rowtrim, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, RowTrimmedConfig<Fp8FastCoop128x256>)
