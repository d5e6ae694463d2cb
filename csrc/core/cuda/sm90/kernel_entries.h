// Every kernel instantiation, as an X-macro list. FP8 kernels are named
// by A's format (dY for dgrad/wgrad: E5M2 under HYBRID); B is always E4M3;
// "_block_" kernels take blockwise scales (Float8BlockScaling). Each is
// defined in its own .cu file named after it (kernels/ always, tuning/ only
// in tuning builds: -DGL_SM90_TUNING=ON) so that they compile in parallel.
#pragma once

#include "core/cuda/sm90/grouped_gemm_sm90.h"

#define GL_SM90_KERNELS(X)                     \
  X(forward_bf16_coop128x256)                  \
  X(forward_bf16_ping64x256)                   \
  X(forward_fp16_coop128x256)                  \
  X(forward_fp16_ping64x256)                   \
  X(dgrad_bf16_coop128x256)                    \
  X(dgrad_bf16_ping64x256)                     \
  X(dgrad_fp16_coop128x256)                    \
  X(dgrad_fp16_ping64x256)                     \
  X(wgrad_bf16_coop128x256)                    \
  X(wgrad_bf16_coop256x128)                    \
  X(wgrad_fp16_coop128x256)                    \
  X(wgrad_fp16_coop256x128)                    \
  X(wgrad_bf16_to_fp32_coop128x256)            \
  X(wgrad_bf16_to_fp32_coop256x128)            \
  X(wgrad_fp16_to_fp32_coop128x256)            \
  X(wgrad_fp16_to_fp32_coop256x128)            \
  X(forward_e4m3_bf16_coop128x128)             \
  X(forward_e4m3_bf16_ping64x128)              \
  X(dgrad_e4m3_bf16_coop128x128)               \
  X(dgrad_e4m3_bf16_ping64x128)                \
  X(dgrad_e5m2_bf16_coop128x128)               \
  X(dgrad_e5m2_bf16_ping64x128)                \
  X(wgrad_e4m3_bf16_coop128x128)               \
  X(wgrad_e5m2_bf16_coop128x192)               \
  X(wgrad_e4m3_to_fp32_coop128x128)            \
  X(wgrad_e5m2_to_fp32_coop128x192)            \
  X(forward_e4m3_bf16_block_coop128x128)       \
  X(dgrad_e4m3_bf16_block_coop128x128)         \
  X(dgrad_e5m2_bf16_block_coop128x128)         \
  X(wgrad_e4m3_bf16_block_coop128x128)         \
  X(wgrad_e5m2_bf16_block_coop128x128)         \
  X(wgrad_e4m3_to_fp32_block_coop128x128)      \
  X(wgrad_e5m2_to_fp32_block_coop128x128)      \
  X(forward_e4m3_bf16_fastcoop128x256)         \
  X(forward_e4m3_bf16_fastping64x256)          \
  X(dgrad_e5m2_bf16_fastcoop128x256)           \
  X(dgrad_e5m2_bf16_fastping64x256)            \
  X(wgrad_e5m2_bf16_fastcoop256x128_widestore) \
  X(wgrad_e5m2_bf16_fastcoop256x128)

// Candidates for `python -m bench.tune_sm90`, never chosen automatically:
// a fast-accumulation wgrad with bf16's tile for long reductions (128x256;
// against the production 256x128 it won mixtral fc1 and lost fc2 in the
// 2026-12-03 runs), and two promoting E5M2 wgrads (the recipes' default,
// 0.23-0.31 of dense at 32-128 experts) that try to overlap the output
// store with the MMAs: 64x192 pingpong and the 128x192 wide store. And
// three production wgrads in clusters of two CTAs that multicast their
// shared B tile ("_c2"): short reductions read every input element from L2
// once per output tile, as much traffic as the output store. And the
// promoting E5M2 dgrad and wgrads on bf16's 128x256 tile with a half-width
// promotion accumulator ("_halfcoop", half_promotion_mainloop.cuh).
// Candidates that lost were removed: the bf16 ones of 2026-12-02
// (benchmarks/h200-2026-12-02-tune-sm90.json, sources in commit ca6849d),
// the FP8 64x128 pingpong wgrad (benchmarks/h200-2026-12-03-tune-sm90-fp8.json),
// the bf16 wide-store wgrad (within +-0.04 of the chosen kernels at
// 32-128 experts, worse at 8; benchmarks/h200-2026-12-03-0e7eb5b-tune-wgrad.json),
// the promoting FP8 wide-store wgrad (coop128x128: within 0.01 of the
// production promoting kernel everywhere; sources in commit d9da9a1,
// benchmarks/h200-2026-12-03-238dd36-tune-wgrad-fp8.json) and the promoting
// FP8 128x192 dgrad (-0.06 to +0.09 against 128x128, mixed; commit eca406d,
// benchmarks/h200-2026-12-03-eca406d-tune-fp8.txt). Winners moved to
// kernels/: the promoting E5M2 wgrad's 128x192 tile, to bf16 (c6ed14f) and
// into a float32 main_grad (equal or better than 128x128 in every case,
// +0.02 to +0.05 of dense at 8 experts;
// benchmarks/h200-2026-12-03-fb76b91-tune-wgrad-main-grad.json).
#define GL_SM90_TUNING_KERNELS(X)                 \
  X(wgrad_e5m2_bf16_fastcoop128x256)              \
  X(wgrad_e5m2_bf16_ping64x192)                   \
  X(wgrad_e5m2_bf16_coop128x192_widestore)        \
  X(wgrad_e5m2_bf16_coop128x192_c2)               \
  X(wgrad_e5m2_bf16_fastcoop256x128_widestore_c2) \
  X(wgrad_bf16_coop256x128_c2)                    \
  X(wgrad_e5m2_bf16_halfcoop128x256)              \
  X(dgrad_e5m2_bf16_halfcoop128x256)              \
  X(wgrad_e5m2_to_fp32_halfcoop128x256)

namespace grouped_linear::cuda::sm90 {

#define GL_SM90_DECLARE(fn) KernelEntry fn();
GL_SM90_KERNELS(GL_SM90_DECLARE)
GL_SM90_TUNING_KERNELS(GL_SM90_DECLARE)
#undef GL_SM90_DECLARE

}  // namespace grouped_linear::cuda::sm90
