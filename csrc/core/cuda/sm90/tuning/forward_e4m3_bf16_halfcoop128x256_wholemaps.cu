#include "core/cuda/sm90/whole_operand_maps_mainloop.cuh"

// Candidate: the promoting E4M3 forward whose producer updates no tensor map
// at a group switch (whole_operand_maps_mainloop.cuh).
GL_SM90_KERNEL_AB(forward_e4m3_bf16_halfcoop128x256_wholemaps, kForward, cutlass::float_e4m3_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8HalfPromotionCoop128x256WholeMaps)
