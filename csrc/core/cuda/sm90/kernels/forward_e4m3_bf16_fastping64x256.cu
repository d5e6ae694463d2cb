#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL(forward_e4m3_bf16_fastping64x256, kForward, cutlass::float_e4m3_t,
               cutlass::bfloat16_t, Fp8FastPing64x256)
