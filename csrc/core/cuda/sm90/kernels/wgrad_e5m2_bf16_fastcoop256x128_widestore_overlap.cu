#include "core/cuda/sm90/overlapped_switch_epilogue.cuh"

// The production fast FP8 wgrad for short reductions, whose group switches
// do not wait for its stores (overlapped_switch_epilogue.cuh).
GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_fastcoop256x128_widestore_overlap, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t,
                  OverlappedSwitch<WideStoreConfig<Fp8FastCoop256x128>>)
