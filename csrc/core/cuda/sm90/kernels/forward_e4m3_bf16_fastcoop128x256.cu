#include "core/cuda/sm90/kernel_configs.cuh"

GL_SM90_KERNEL(forward_e4m3_bf16_fastcoop128x256, kForward, cutlass::float_e4m3_t,
               cutlass::bfloat16_t, Fp8FastCoop128x256)
