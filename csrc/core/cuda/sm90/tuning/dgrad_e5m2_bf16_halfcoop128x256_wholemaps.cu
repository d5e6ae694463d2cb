#include "core/cuda/sm90/whole_operand_maps_mainloop.cuh"

// Candidate: the promoting E5M2 dgrad whose producer updates no tensor map
// at a group switch (whole_operand_maps_mainloop.cuh).
GL_SM90_KERNEL_AB(dgrad_e5m2_bf16_halfcoop128x256_wholemaps, kDgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, Fp8HalfPromotionCoop128x256WholeMaps)
