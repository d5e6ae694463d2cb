#include "core/cuda/sm90/direct_store_epilogue.cuh"
#include "core/cuda/sm90/half_promotion_mainloop.cuh"

// The production promoting E4M3 forward with the direct store (alpha and
// bias applied by it).
GL_SM90_KERNEL(forward_e4m3_bf16_halfcoop128x256_direct, kForward, cutlass::float_e4m3_t,
               cutlass::bfloat16_t, DirectStoreConfig<Fp8HalfPromotionCoop128x256>)
