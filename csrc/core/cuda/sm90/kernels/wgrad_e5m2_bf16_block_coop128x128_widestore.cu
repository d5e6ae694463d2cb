#include "core/cuda/sm90/kernel_configs.cuh"

// The blockwise-scaled wgrad with E5M2 dY (a HYBRID block recipe) and the
// wide store of the per-tensor wgrads (WideStoreConfig): the 128x128 tile
// leaves as one piece instead of the default epilogue's smaller ones, and no
// C operand is read (beta = 0 only, never into main_grad).
GL_SM90_KERNEL_AB(wgrad_e5m2_bf16_block_coop128x128_widestore, kWgrad, cutlass::float_e5m2_t,
                  cutlass::float_e4m3_t, cutlass::bfloat16_t, WideStoreConfig<Fp8BlockCoop128x128>)
