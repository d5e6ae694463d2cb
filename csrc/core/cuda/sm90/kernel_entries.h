// Every kernel instantiation, as an X-macro list. FP8 kernels are named
// by A's format (dY for dgrad/wgrad: E5M2 under HYBRID) and their output
// (bf16, fp16, fp32; "to_fp32": the wgrads that also accumulate into a
// float32 main_grad); B is always E4M3; "_block_" kernels take blockwise
// scales (Float8BlockScaling). The fp16 and fp32 outputs have one promoting
// kernel per role and scaling, bf16's tile, for layers whose activations
// (or, for wgrad, weights) are in that dtype. Each is
// defined in its own .cu file named after it (kernels/ always, tuning/ only
// in tuning builds: -DGL_SM90_TUNING=ON); the build compiles them in unity
// units of up to six, which share most of their CUTLASS instantiations
// (cmake/sm90_unity.cmake).
#pragma once

#include "core/cuda/sm90/grouped_gemm_sm90.h"

#define GL_SM90_KERNELS(X)                           \
  X(forward_bf16_coop128x256)                        \
  X(forward_bf16_ping64x256)                         \
  X(forward_fp16_coop128x256)                        \
  X(forward_fp16_ping64x256)                         \
  X(dgrad_bf16_coop128x256)                          \
  X(dgrad_bf16_ping64x256)                           \
  X(dgrad_fp16_coop128x256)                          \
  X(dgrad_fp16_ping64x256)                           \
  X(wgrad_bf16_coop128x256)                          \
  X(wgrad_bf16_coop256x128)                          \
  X(wgrad_fp16_coop128x256)                          \
  X(wgrad_fp16_coop256x128)                          \
  X(wgrad_bf16_to_fp32_coop128x256)                  \
  X(wgrad_bf16_to_fp32_coop256x128)                  \
  X(wgrad_fp16_to_fp32_coop128x256)                  \
  X(wgrad_fp16_to_fp32_coop256x128)                  \
  X(forward_e4m3_bf16_halfcoop128x256)               \
  X(dgrad_e4m3_bf16_coop128x128)                     \
  X(dgrad_e4m3_bf16_ping64x128)                      \
  X(dgrad_e5m2_bf16_halfcoop128x256)                 \
  X(wgrad_e4m3_bf16_coop128x128)                     \
  X(wgrad_e5m2_bf16_halfcoop128x256_widestore)       \
  X(wgrad_e5m2_bf16_halfcoop128x256)                 \
  X(wgrad_e4m3_to_fp32_coop128x128)                  \
  X(wgrad_e5m2_to_fp32_halfcoop128x256)              \
  X(forward_e4m3_bf16_block_coop128x128)             \
  X(dgrad_e4m3_bf16_block_coop128x128)               \
  X(dgrad_e5m2_bf16_block_coop128x128)               \
  X(wgrad_e4m3_bf16_block_halfcoop128x256_widestore) \
  X(wgrad_e4m3_bf16_block_coop128x128_widestore)     \
  X(wgrad_e5m2_bf16_block_coop128x128_widestore)     \
  X(wgrad_e4m3_bf16_block_coop128x128)               \
  X(wgrad_e5m2_bf16_block_coop128x128)               \
  X(wgrad_e4m3_to_fp32_block_coop128x128)            \
  X(wgrad_e5m2_to_fp32_block_coop128x128)            \
  X(forward_e4m3_bf16_fastcoop128x256)               \
  X(forward_e4m3_bf16_fastping64x256)                \
  X(dgrad_e5m2_bf16_fastcoop128x256)                 \
  X(dgrad_e5m2_bf16_fastping64x256)                  \
  X(wgrad_e5m2_bf16_fastcoop256x128_widestore)       \
  X(wgrad_e5m2_bf16_fastcoop256x128)                 \
  X(forward_e4m3_fp16_halfcoop128x256)               \
  X(forward_e4m3_fp32_halfcoop128x256)               \
  X(dgrad_e5m2_fp16_halfcoop128x256)                 \
  X(dgrad_e5m2_fp32_halfcoop128x256)                 \
  X(dgrad_e4m3_fp16_coop128x128)                     \
  X(dgrad_e4m3_fp32_coop128x128)                     \
  X(wgrad_e5m2_fp16_halfcoop128x256_widestore)       \
  X(wgrad_e4m3_fp16_coop128x128)                     \
  X(forward_e4m3_fp16_block_coop128x128)             \
  X(forward_e4m3_fp32_block_coop128x128)             \
  X(dgrad_e5m2_fp16_block_coop128x128)               \
  X(dgrad_e5m2_fp32_block_coop128x128)               \
  X(dgrad_e4m3_fp16_block_coop128x128)               \
  X(dgrad_e4m3_fp32_block_coop128x128)               \
  X(wgrad_e5m2_fp16_block_coop128x128_widestore)     \
  X(wgrad_e4m3_fp16_block_coop128x128_widestore)

// Kernels chosen automatically only where groups average under
// kShortGroupRows rows (kernel_table.cpp), before those of GL_SM90_KERNELS.
// - The FP8 wide-store wgrads whose group switches do not wait for their
//   stores (overlapped_switch_epilogue.cuh): with short groups a CTA's
//   tiles mostly change group. 2026-12-06 on an H200 (`python -m
//   bench.tune_sm90 --precision fp8 --roles wgrad`, two runs): +0.04 to
//   +0.06 of dense at qwen3 uniform, +0.01 to +0.02 skewed, within 0.01 at
//   dsv3; at mixtral (long reductions) up to 0.08 below the kernels they
//   copy. The fp16 one (for fp16 weights) copies the promoting bf16 one.
// - The blockwise-scaled bf16 forward and E4M3 dgrad on 128x256 tiles with
//   the two consumer warpgroups taking turns at the tensor cores
//   (tensor_core_turns.cuh: one scales its k-block's sums while the
//   other's MMAs run) and the wide store. Against CUTLASS's 128x128
//   (_block_coop128x128), as a share of dense, at 32-128 experts (256
//   rows a group): on one H200 (2026-12-07, two runs) the forward
//   1.00-1.16, the dgrad 1.00-1.10, ahead most where routing is skewed; on
//   H100s the forward 0.99-1.22 in four runs. At mixtral (8 experts, 2048
//   rows a group) the H200 put them at 0.88-1.02 (forward) and 0.89-1.02
//   (dgrad), the H100s the forward at 0.92-1.13, so long groups keep
//   128x128 (benchmarks/h200-2026-12-07-ce15be8-tune-block-turns-*.json,
//   h100-2026-12-07-tune-block-turns.txt,
//   h100-2026-12-07-e5fdf2c-tune-stagger-*.json). Without the turns the
//   same tile lost to 128x128 (below). fp16 and fp32 outputs keep 128x128.
#define GL_SM90_SHORT_GROUP_KERNELS(X)                    \
  X(wgrad_e5m2_bf16_halfcoop128x256_widestore_overlap)    \
  X(wgrad_e5m2_bf16_fastcoop256x128_widestore_overlap)    \
  X(wgrad_e5m2_fp16_halfcoop128x256_widestore_overlap)    \
  X(forward_e4m3_bf16_block_staggercoop128x256_widestore) \
  X(dgrad_e4m3_bf16_block_staggercoop128x256_widestore)

// Candidates for `python -m bench.tune_sm90`, never chosen automatically:
// a fast-accumulation wgrad with bf16's tile for long reductions (128x256;
// against the production 256x128 it won mixtral fc1 and lost fc2 in the
// 2026-12-03 runs); the forward and dgrad with the wgrads' wide store
// (the promoting FP8 ones on 128x256 and bf16's forward), for the 32-128
// expert cases with short K, where a tile's store is a large part of its
// time and the default epilogue waits on it. Their timings are mixed on
// both GPUs, against the regular store: the FP8 forward +0.00..+0.08 of
// dense on an H100 and -0.04..+0.08 on the H200 (ahead in all four
// mixtral rows there, +0.02..+0.08), the FP8 dgrad -0.04..+0.06 and
// -0.10..+0.09, bf16's forward -0.07..+0.07 and -0.06..+0.09 (H100:
// benchmarks/h100-2026-12-05-d75c52e-tune-*.json; H200, one run of 15
// timings a kernel: h200-2026-12-06-f0723be-tune-*-widestore.json).
// The blockwise-scaled forward and E4M3 dgrad with the pipelined promotion
// (block_pipelined_promotion_mainloop.cuh: a k-block's MMAs run while the
// previous one's sums are scaled), against CUTLASS's mainloop on the same
// 128x128 tile; the same bits (tests/python/test_sm90_fp8_kernels.py).
// Mixed on one H100 (2026-12-07, two runs, K-major scales then): 0.99 of
// the production kernels' time over the 24 rows (geometric mean), 0.91 at
// dsv3 fc2's forward uniform, 1.04-1.08 at mixtral fc2's forward
// (benchmarks/h100-2026-12-07-f9916c0-tune-block-pipelined*.json). With
// block-major scales (one run): 0.95-1.02 at 32-128 experts, 0.93-1.22 at
// mixtral (benchmarks/h100-2026-12-07-76b649c-tune-fp8-block-major.json).
// Candidates that lost were removed, with the run that decided:
//  - taking turns at the tensor cores elsewhere (sources in commit
//    ce15be8), each against the kernel it would replace, as a share of
//    dense, two runs on one H200 (2026-12-07,
//    benchmarks/h200-2026-12-07-ce15be8-tune-*-turns-*.json): the
//    per-tensor promoting forward 0.90-1.02 and E5M2 dgrad 0.95-1.00 of
//    the half-width ones at 32-128 experts (their promotion is one add an
//    element, little to hide); the blockwise forward with the default
//    store instead of the wide one 0.94-1.03 of it;
//  - the blockwise E4M3 wgrad taking turns (sources in commit b84aa7c),
//    against the production _block_halfcoop128x256_widestore (the same
//    bits): as a share of dense, candidate over production, 0.96-1.12 at
//    32-128 experts (geometric means 0.99 and 1.03 in two runs on one H100)
//    and 0.90-1.08 at mixtral (1.00, 0.95)
//    (benchmarks/h100-2026-12-07-e5fdf2c-tune-stagger-*.json); a third
//    run, 0.98-1.01 and 0.86-1.02
//    (benchmarks/h100-2026-12-07-tune-block-turns.txt);
//  - the blockwise forward on 128x256 with the half-width promotion and
//    both warpgroups issuing together (written again 2026-12-07 to
//    separate the tile from the turns; the config is
//    Fp8BlockHalfPromotionCoop128x256WideStore): below the same kernel
//    taking turns in all 24 rows of two runs on one H100, 0.84-0.99 of
//    its share of dense (benchmarks/h100-2026-12-07-tune-block-turns.txt);
//  - the per-tensor promoting wgrad taking turns (sources in commit
//    e5fdf2c): against the production _halfcoop128x256_widestore_overlap,
//    0.95-1.03 at 32-128 experts (geometric means 1.00 and 0.99) and
//    0.91-1.04 at mixtral (0.96, 0.98) in two runs on one H100
//    (benchmarks/h100-2026-12-07-e5fdf2c-tune-fp8-stagger-*.json);
//  - the direct store (sources in commit 123ff57): an epilogue that wrote
//    each thread's accumulators to global memory from registers (16-byte
//    stores after an exchange within each quad of lanes; 8-byte pairs for
//    float), with no shared-memory staging, barriers or store descriptors,
//    on the production forwards, dgrad and wgrads. Correct (the float64
//    checks passed) and slower everywhere on one H100: FP8 wgrad -0.23..
//    -0.08 of dense at 32-128 experts (0.18-0.23 against 0.27-0.43), into
//    a float32 main_grad 0.05 against 0.11-0.13, forward and dgrad
//    -0.13..-0.04, bf16 wgrad -0.21..-0.12; at 8 experts up to -0.30
//    (benchmarks/h100-2026-12-06-123ff57-tune-direct-{fp8,bf16}.json). The
//    tile's writes leave faster through the TMA store than from registers;
//    what bounds wgrad is not the staging;
//  - the forwards and dgrads on 128x256 cooperative tiles without the MMAs
//    of a warpgroup whose 64 rows are all past its group's end (promoting
//    and fast FP8, bf16; RowTrimmedMainloop, sources in commit 29610d7),
//    the same bits as the production kernels. On one H100, against them:
//    promoting FP8 -0.06..+0.02 of dense at 32-128 experts, fast FP8
//    -0.11..-0.01, bf16 -0.10..-0.01; a tile whose second warpgroup has no
//    rows took about as long with its MMAs left out as with them
//    (benchmarks/h100-2026-12-06-29610d7-tune-candidates-*.json,
//    -group-probe*.json);
//  - the fast FP8 forward and dgrad on 128x128 pingpong tiles (same commit
//    and runs): -0.03..+0.03 of dense against the better production fast
//    kernel with uniform routing at 32-128 experts, -0.18..-0.04 with
//    skewed routing, -0.41..-0.14 at 8 experts;
//  - the blockwise-scaled forward and dgrad on 128x256 tiles with the
//    half-width promotion (written 2026-12-04; sources in commit dc4809a):
//    on the H200 the forward -0.15..+0.02 of dense against 128x128 (ahead
//    only at qwen3, by up to 0.02), the dgrad -0.14..+0.00
//    (h200-2026-12-06-f0723be-tune-fp8-block.json; the H100's -0.04..+0.08
//    and -0.06..+0.01 had left them open);
//  - the bf16 ones of 2026-12-02 (benchmarks/h200-2026-12-02-tune-sm90.json,
//    sources in commit ca6849d);
//  - the FP8 64x128 pingpong wgrad
//    (benchmarks/h200-2026-12-03-tune-sm90-fp8.json);
//  - the bf16 wide-store wgrad (within +-0.04 of the chosen kernels at 32-128
//    experts, worse at 8; benchmarks/h200-2026-12-03-0e7eb5b-tune-wgrad.json);
//  - the promoting FP8 wide-store wgrads, 128x128 (within 0.01 of the
//    regular store; d9da9a1) and 128x192 (0.26-0.33 of dense at 32-128
//    experts against 0.30-0.39 for the half-width promotion; 12615d0);
//  - the promoting FP8 64x192 pingpong wgrad: 0.04-0.20 below 128x192;
//  - the 2-CTA cluster wgrads that multicast the shared B tile (promoting
//    FP8 128x192, fast FP8 wide-store 256x128, bf16 256x128; 7f8981e): up
//    to +0.14 of dense at mixtral fc2, within +-0.04 elsewhere, and the two
//    FP8 ones each failed the float64 check on one case (G40 K80 N272, host
//    splits: 10% error) in one of two runs: a race, not pursued.
//    (The last three: benchmarks/h200-2026-12-03-12615d0-tune.txt.)
//  - the promoting E5M2 wgrad and dgrad whose promotion adds overlapped the
//    next MMAs (four quarter-width MMAs a k-block into two temporaries):
//    wgrad within -0.05..+0.02 of the half-width promotion, dgrad 0.01-0.11
//    below it (benchmarks/h200-2026-12-03-84076b9-tune-fp8.json; sources in
//    commit 84076b9).
//  - the wgrads on 128x128 pingpong tiles with the wide store, whose
//    warpgroups each own a tile so that one's store overlaps the other's
//    MMAs (fast and promoting FP8, bf16; sources in commit 96e5230). FP8:
//    0.03-0.07 of dense below the cooperative wide-store wgrads at 32-128
//    experts, up to 0.34 below at 8. bf16: +0.09 at dsv3 uniform (where
//    the cooperative ones ran 0.20 below their 2026-12-02 figures), within
//    0.02 at dsv3 skewed and qwen3 fc1, 0.04-0.27 below elsewhere
//    (benchmarks/h200-2026-12-04-96e5230-tune-wgrad-pingpong-*.json).
//  - Deeper store staging (2026-12-06, sources in the overlapped switch's
//    commit): the FP8 wide-store wgrads with four 128x128 pieces staged
//    (two tiles in flight, two mainloop stages left), with and without the
//    overlapped switch: within 0.02 of dense at 32-128 experts uniform,
//    0.02-0.08 below skewed, up to 0.37 below at mixtral (one H200,
//    benchmarks/h200-2026-12-06-overlap-tune-wgrad-fp8*.json). bf16's
//    256x128 wgrad with the overlapped switch: 0.03-0.04 below at 32-128
//    experts (one H100, h100-2026-12-06-overlap-tune-wgrad-bf16.json).
//    Smaller pieces in the same 64 KB, all staged, so that a piece's
//    commit waits for the piece four or eight back rather than the one
//    before (overlapped switch too; one H100): four 128x64 within 0.03 of
//    the two 128x128 at 32-128 experts but for dsv3 fc1 uniform (+0.03),
//    eight 128x32 0.01-0.08 below
//    (benchmarks/h100-2026-12-06-tune-wgrad-store-pieces.json).
//  - The forward and dgrad on 2-CTA clusters along M, the pair sharing the
//    weight tile by TMA multicast (2026-12-06, sources in c44611b; promoting
//    and fast FP8, bf16 forward; one H100, two runs), each against the
//    same kernel on one CTA: -0.03..+0.05 of dense at 32-128 experts
//    uniform, 0.05-0.18 below skewed (each group's row tiles are rounded up
//    to the pair), mixtral -0.15..+0.13
//    (benchmarks/h100-2026-12-06-tune-cluster2-*.json). Half
//    the weight tile's L2 reads buys nothing: those forwards are not bound
//    by L2-to-SM traffic.
//  - The blockwise-scaled forward, dgrad and wgrad on 64x128 pingpong tiles
//    (2026-12-06, sources in commit 3317dfc), so that one warpgroup's
//    scaling of its k-block partial sums and its epilogue could overlap the
//    other's MMAs: below the production blockwise kernels in every row on
//    one H100, two runs (forward -0.22..-0.02 of cuBLAS's blockwise GEMM,
//    dgrad -0.19..-0.06, wgrad -0.37..-0.15 against the 128x256 half-width
//    one; benchmarks/h100-2026-12-06-tune-block-ping*.json).
//  - A producer that also prefetched the weight tile into L2 (TMA
//    prefetch, no shared memory) 4 or 8 k-tiles ahead of the stage it
//    loaded, to look further ahead than the four 48 KB stages (2026-12-06,
//    sources in commit 483a049; promoting FP8 forward and dgrad, fast FP8
//    forward, bf16 forward; one H100, two runs). Against the same kernels
//    without it, at 32-128 experts: -0.14..+0.01 of dense (the FP8 forward
//    -0.06..-0.00 at 4 k-tiles, -0.14..+0.00 at 8; bf16 -0.12..-0.01);
//    at mixtral -0.30..+0.03 (benchmarks/h100-2026-12-06-tune-l2-prefetch-*.json).
//    The forwards at 32-128 experts are not short of loads in flight.
//  - Group switches without waits (2026-12-06, sources in commit 2272e0d;
//    one H100, `python -m bench.tune_sm90 --precision fp8 --roles
//    fwd,dgrad`, three runs, and bf16's forward once). At 32-128 experts
//    nearly every tile of a CTA is in another group than its last, and at
//    each switch the epilogue waited for the last tile's stores to leave
//    shared memory and the producer rewrote and fenced both load maps.
//    (a) The wide-store forwards and dgrad with the wgrads' overlapped
//    switch: -0.05..+0.00 of dense against the same kernels without it at
//    32-128 experts, mixtral -0.20..+0.00 (bf16 -0.01..+0.00 and up to
//    +0.10 at mixtral skewed). (b) The promoting forward and dgrad reading A
//    and B through one tensor map each for the whole call, mapped once per
//    CTA, a group being a row offset into them (no map update, fence or
//    pointer-array read at a switch): -0.04..+0.06 of dense against the
//    production kernels, within 0.02 but for dsv3 fc1's forward (-0.03,
//    -0.04) and fc2's (+0.05, +0.06) uniform; mixtral -0.07..+0.04. Both
//    passed their float64 checks. A group switch is not what the forward
//    and dgrad at 32-128 experts lose on a tile
//    (benchmarks/h100-2026-12-06-tune-overlap-*.json).
// Winners moved to kernels/: the promoting E5M2 wgrad's 128x192 tile
// (c6ed14f, fb76b91), since replaced, like the promoting E5M2 dgrad, by the
// half-width promotion on 128x256 (12615d0: wgrad +0.04 to +0.09 of dense at
// 32-128 experts, dgrad +0.03 to +0.11 over 128x128 and above 64x128
// everywhere; into float32 main_grad equal or better), and then the
// promoting E4M3 forward (b88b52e: +0.04 to +0.16 over 128x128, above
// 64x128 everywhere; benchmarks/h200-2026-12-03-b88b52e-tune-fwd.txt), and
// the promoting E5M2 wgrad with the wide store (84076b9: +0.01 to +0.10 of
// dense over the regular store in every case, 8 experts included), and the
// blockwise-scaled wgrads with the wide store (2026-12-04, both kernels by
// override on one H200, outputs bit-identical: dsv3 fc1 1.81 -> 1.38 ms
// uniform and 2.11 -> 1.61 skewed, mixtral fc1 and qwen3 fc1 within 4%;
// benchmarks/h200-2026-12-04-block-wgrad-store.txt), and the blockwise E4M3
// wgrad on 128x256 with the half-width promotion and the wide store
// (2026-12-05 on an H100: +0.08 to +0.19 of dense over 128x128 in all 12
// tuning rows, 0.36-0.62 at 32-128 experts, 0.70-0.95 at 8;
// benchmarks/h100-2026-12-05-d75c52e-tune-fp8-block.json). It is listed
// before the 128x128 one, which keeps E5M2 dY (no 128x256 kernel) and
// accumulation (the wide store reads no C). And the blockwise bf16
// forward and E4M3 dgrad on 128x256 taking turns at the tensor cores, for
// short groups (GL_SM90_SHORT_GROUP_KERNELS above).
// References removed once they had measured their change: the forward,
// dgrad and blockwise wgrad reading the activations' scales K-major
// (`_block_km*`, sources in commit 76b649c), the layout before they became
// block-major. Against them, the block-major production kernels took
// 0.75-0.97 of their time in wgrad (every row), 0.79-1.01 in mixtral's
// forward and dgrad and 0.96-1.03 in the forward and dgrad at 32-128
// experts on H100s (2026-12-07, three runs;
// benchmarks/h100-2026-12-07-76b649c-tune-fp8-block-major*.json,
// h100-2026-12-07-ec07e5e-tune-fp8-block-major-third.json).
#define GL_SM90_TUNING_KERNELS(X)                \
  X(wgrad_e5m2_bf16_fastcoop128x256)             \
  X(forward_e4m3_bf16_halfcoop128x256_widestore) \
  X(dgrad_e5m2_bf16_halfcoop128x256_widestore)   \
  X(forward_bf16_coop128x256_widestore)          \
  X(forward_e4m3_bf16_block_pipecoop128x128)     \
  X(dgrad_e4m3_bf16_block_pipecoop128x128)

namespace grouped_linear::cuda::sm90 {

#define GL_SM90_DECLARE(fn) KernelEntry fn();
GL_SM90_SHORT_GROUP_KERNELS(GL_SM90_DECLARE)
GL_SM90_KERNELS(GL_SM90_DECLARE)
GL_SM90_TUNING_KERNELS(GL_SM90_DECLARE)
#undef GL_SM90_DECLARE

}  // namespace grouped_linear::cuda::sm90
