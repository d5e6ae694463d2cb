// Which sm90 kernel the engine picks per problem (sm90/kernel_table.cpp),
// and where the block-scaled kernels read each group's scales. Host logic
// only, so it runs without a GPU: CI checks the rule itself, the GPU tests
// check every kernel's numerics.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/sm90/grouped_gemm_sm90.h"
#include "core/error.h"
#include "fp8_ops_test_util.h"

namespace grouped_linear::cuda::sm90 {
namespace {

std::string pick(Role role, DType in, DType out, const std::vector<int64_t>& sizes,
                 bool host = true) {
  GroupShape shape;
  shape.num_groups = static_cast<int>(sizes.size());
  for (int64_t s : sizes) shape.total_rows += s;
  shape.host_sizes = host ? sizes.data() : nullptr;
  shape.n = 1536;
  shape.k = 2048;
  const KernelEntry* e = select_kernel(role, in, out, shape);
  return e == nullptr ? "none" : e->name;
}

constexpr DType kBf16 = DType::kBFloat16;

std::vector<int64_t> skewed(int groups) {  // alternating short and long groups, mean 256
  std::vector<int64_t> sizes;
  for (int g = 0; g < groups; ++g) sizes.push_back(g % 2 ? 494 : 18);
  return sizes;
}

TEST(Sm90KernelSelection, FullTilesForUniformGroups) {
  const std::vector<int64_t> uniform(128, 256);
  EXPECT_EQ(pick(Role::kForward, kBf16, kBf16, uniform), "forward_bf16_coop128x256");
  EXPECT_EQ(pick(Role::kDgrad, kBf16, kBf16, uniform), "dgrad_bf16_coop128x256");
}

TEST(Sm90KernelSelection, ShortTilesWhenGroupsPadBadly) {
  EXPECT_EQ(pick(Role::kForward, kBf16, kBf16, skewed(128)), "forward_bf16_ping64x256");
  EXPECT_EQ(pick(Role::kDgrad, DType::kFloat16, DType::kFloat16, skewed(32)),
            "dgrad_fp16_ping64x256");
}

TEST(Sm90KernelSelection, DeviceSizesGoByTheAverage) {
  EXPECT_EQ(pick(Role::kForward, kBf16, kBf16, std::vector<int64_t>(128, 256), false),
            "forward_bf16_ping64x256");
  EXPECT_EQ(pick(Role::kForward, kBf16, kBf16, std::vector<int64_t>(8, 2048), false),
            "forward_bf16_coop128x256");
}

TEST(Sm90KernelSelection, WgradTilesFollowTheReductionLength) {
  EXPECT_EQ(pick(Role::kWgrad, kBf16, kBf16, std::vector<int64_t>(128, 256)),
            "wgrad_bf16_coop256x128");
  EXPECT_EQ(pick(Role::kWgrad, kBf16, kBf16, std::vector<int64_t>(8, 2048)),
            "wgrad_bf16_coop128x256");
  EXPECT_EQ(pick(Role::kWgrad, DType::kFloat16, DType::kFloat32, std::vector<int64_t>(32, 256)),
            "wgrad_fp16_to_fp32_coop256x128");
}

TEST(Sm90KernelSelection, EveryRoleAndDtypeHasAKernelAndOthersNone) {
  for (DType in : {DType::kBFloat16, DType::kFloat16}) {
    EXPECT_NE(pick(Role::kForward, in, in, {64, 0, 64}), "none");
    EXPECT_NE(pick(Role::kDgrad, in, in, {64, 0, 64}), "none");
    EXPECT_NE(pick(Role::kWgrad, in, in, {64, 0, 64}), "none");
    EXPECT_NE(pick(Role::kWgrad, in, DType::kFloat32, {64, 0, 64}), "none");
  }
  EXPECT_EQ(pick(Role::kForward, DType::kFloat32, DType::kFloat32, {64}), "none");
  EXPECT_EQ(pick(Role::kForward, kBf16, DType::kFloat16, {64}), "none");
  EXPECT_EQ(pick(Role::kForward, kBf16, kBf16, {0, 0}), "forward_bf16_coop128x256");
}

std::string pick_fp8(Role role, DType a, DType b, DType out, const std::vector<int64_t>& sizes,
                     bool block_scaled = false, bool fast_accumulation = false,
                     bool accumulate = false, bool host = true) {
  GroupShape shape;
  shape.accumulate = accumulate;
  shape.num_groups = static_cast<int>(sizes.size());
  for (int64_t s : sizes) shape.total_rows += s;
  shape.host_sizes = host ? sizes.data() : nullptr;
  shape.n = 1536;
  shape.k = 2048;
  const KernelEntry* e =
      block_scaled || fast_accumulation || accumulate
          ? select_kernel(role, a, b, out, block_scaled, shape, fast_accumulation)
          : select_kernel(role, a, b, out, shape);
  return e == nullptr ? "none" : e->name;
}

TEST(Sm90KernelSelection, Fp8KernelsMatchBothOperandFormats) {
  constexpr DType kE4 = DType::kFloat8E4M3, kE5 = DType::kFloat8E5M2;
  const std::vector<int64_t> uniform(8, 2048);
  // The promoting E4M3 forward has one tile too (above 64x128 everywhere).
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, uniform),
            "forward_e4m3_bf16_halfcoop128x256");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, skewed(128)),
            "forward_e4m3_bf16_halfcoop128x256");
  // HYBRID: E5M2 gradients times E4M3 weights / activations. The promoting
  // E5M2 dgrad has one tile (128x256 beat 64x128 in every tuning case).
  for (const auto& sizes : {uniform, skewed(128)})
    EXPECT_EQ(pick_fp8(Role::kDgrad, kE5, kE4, kBf16, sizes), "dgrad_e5m2_bf16_halfcoop128x256");
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, DType::kFloat32, uniform),
            "wgrad_e5m2_to_fp32_halfcoop128x256");
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE4, kE4, kBf16, std::vector<int64_t>(128, 256)),
            "wgrad_e4m3_bf16_coop128x128");
  // No E5M2 weights, no E5M2 forward, no mixed 16-bit / FP8 operands.
  EXPECT_EQ(pick_fp8(Role::kDgrad, kE4, kE5, kBf16, uniform), "none");
  EXPECT_EQ(pick_fp8(Role::kForward, kE5, kE4, kBf16, uniform), "none");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kBf16, kBf16, uniform), "none");
}

TEST(Sm90KernelSelection, BlockScaledKernelsOnlyForBlockScales) {
  constexpr DType kE4 = DType::kFloat8E4M3, kE5 = DType::kFloat8E5M2, kF32 = DType::kFloat32;
  const std::vector<int64_t> uniform(8, 2048);
  // The bf16 wgrad stores its tile whole (_widestore) unless it accumulates
  // into the output, which those kernels cannot; E4M3 dY's on 128x256
  // tiles. The bf16 forward and E4M3 dgrad: 128x256 tiles whose warpgroups
  // take turns at the tensor cores where groups average under 1024 rows,
  // else 128x128.
  for (const auto& sizes :
       {uniform, skewed(128), std::vector<int64_t>{0, 0}, std::vector<int64_t>(32, 4096)}) {
    int64_t rows = 0;
    for (const int64_t m : sizes) rows += m;
    const bool short_groups = rows < 1024 * static_cast<int64_t>(sizes.size());
    EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, sizes, true),
              short_groups ? "forward_e4m3_bf16_block_staggercoop128x256_widestore"
                           : "forward_e4m3_bf16_block_coop128x128");
    EXPECT_EQ(pick_fp8(Role::kDgrad, kE4, kE4, kBf16, sizes, true),
              short_groups ? "dgrad_e4m3_bf16_block_staggercoop128x256_widestore"
                           : "dgrad_e4m3_bf16_block_coop128x128");
    EXPECT_EQ(pick_fp8(Role::kWgrad, kE4, kE4, kBf16, sizes, true),
              "wgrad_e4m3_bf16_block_halfcoop128x256_widestore");
    EXPECT_EQ(pick_fp8(Role::kWgrad, kE4, kE4, kBf16, sizes, true, false, /*accumulate=*/true),
              "wgrad_e4m3_bf16_block_coop128x128");
  }
  EXPECT_EQ(pick_fp8(Role::kDgrad, kE5, kE4, kBf16, uniform, true),
            "dgrad_e5m2_bf16_block_coop128x128");
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, uniform, true),
            "wgrad_e5m2_bf16_block_coop128x128_widestore");
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, uniform, true, false, /*accumulate=*/true),
            "wgrad_e5m2_bf16_block_coop128x128");
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE4, kE4, kF32, uniform, true),
            "wgrad_e4m3_to_fp32_block_coop128x128");
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kF32, uniform, true),
            "wgrad_e5m2_to_fp32_block_coop128x128");
  // Per-tensor problems never get a block-scaled kernel, nor the reverse.
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, uniform),
            "forward_e4m3_bf16_halfcoop128x256");
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE4, kE4, kF32, uniform), "wgrad_e4m3_to_fp32_coop128x128");
  // No E5M2 forward, no E5M2 weights, no 16-bit operands.
  EXPECT_EQ(pick_fp8(Role::kForward, kE5, kE4, kBf16, uniform, true), "none");
  EXPECT_EQ(pick_fp8(Role::kDgrad, kE4, kE5, kBf16, uniform, true), "none");
  EXPECT_EQ(pick_fp8(Role::kForward, kBf16, kBf16, kBf16, uniform, true), "none");
}

// FP8 layers whose activations (forward, dgrad) or weights (wgrad) are fp16
// or fp32 get kernels with that output, per-tensor and blockwise, for both
// gradient formats: one promoting kernel each, on the bf16 kernel's tile,
// also where the recipe allows fast accumulation.
TEST(Sm90KernelSelection, Fp8KernelsForEveryOutputDtype) {
  constexpr DType kE4 = DType::kFloat8E4M3, kE5 = DType::kFloat8E5M2;
  constexpr DType kF16 = DType::kFloat16, kF32 = DType::kFloat32;
  for (const auto& sizes : {std::vector<int64_t>(8, 2048), skewed(128), std::vector<int64_t>{0}})
    for (const bool fast : {false, true}) {
      EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kF16, sizes, false, fast),
                "forward_e4m3_fp16_halfcoop128x256");
      EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kF32, sizes, false, fast),
                "forward_e4m3_fp32_halfcoop128x256");
      EXPECT_EQ(pick_fp8(Role::kDgrad, kE5, kE4, kF16, sizes, false, fast),
                "dgrad_e5m2_fp16_halfcoop128x256");
      EXPECT_EQ(pick_fp8(Role::kDgrad, kE5, kE4, kF32, sizes, false, fast),
                "dgrad_e5m2_fp32_halfcoop128x256");
      EXPECT_EQ(pick_fp8(Role::kDgrad, kE4, kE4, kF16, sizes, false, fast),
                "dgrad_e4m3_fp16_coop128x128");
      EXPECT_EQ(pick_fp8(Role::kDgrad, kE4, kE4, kF32, sizes, false, fast),
                "dgrad_e4m3_fp32_coop128x128");
      // Under 1024 rows a group on average, the copy with the overlapped switch.
      EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kF16, sizes, false, fast),
                sizes.size() == 8 ? "wgrad_e5m2_fp16_halfcoop128x256_widestore"
                                  : "wgrad_e5m2_fp16_halfcoop128x256_widestore_overlap");
      EXPECT_EQ(pick_fp8(Role::kWgrad, kE4, kE4, kF16, sizes, false, fast),
                "wgrad_e4m3_fp16_coop128x128");
      // float32 weights: the main_grad kernels, which also overwrite (beta = 0).
      EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kF32, sizes, false, fast),
                "wgrad_e5m2_to_fp32_halfcoop128x256");
      for (const DType out : {kF16, kF32}) {
        const std::string o = out == kF16 ? "fp16" : "fp32";
        EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, out, sizes, true, fast),
                  "forward_e4m3_" + o + "_block_coop128x128");
        EXPECT_EQ(pick_fp8(Role::kDgrad, kE5, kE4, out, sizes, true, fast),
                  "dgrad_e5m2_" + o + "_block_coop128x128");
        EXPECT_EQ(pick_fp8(Role::kDgrad, kE4, kE4, out, sizes, true, fast),
                  "dgrad_e4m3_" + o + "_block_coop128x128");
      }
      EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kF16, sizes, true, fast),
                "wgrad_e5m2_fp16_block_coop128x128_widestore");
      EXPECT_EQ(pick_fp8(Role::kWgrad, kE4, kE4, kF16, sizes, true, fast),
                "wgrad_e4m3_fp16_block_coop128x128_widestore");
    }
  // The E5M2 fp16 wgrad stores wide and reads no C, so adding into an fp16
  // buffer is emulated (never a module's case: main_grad is float32).
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kF16, std::vector<int64_t>(8, 2048), false, false,
                     /*accumulate=*/true),
            "none");
}

TEST(Sm90KernelSelection, OverrideKeepsPerTensorAndBlockScalingApart) {
  constexpr DType kE4 = DType::kFloat8E4M3;
  const std::vector<int64_t> uniform(8, 2048);
  set_kernel_override("forward_e4m3_bf16_block_coop128x128");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, uniform, true),
            "forward_e4m3_bf16_block_coop128x128");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, uniform),
            "forward_e4m3_bf16_halfcoop128x256");
  set_kernel_override("forward_e4m3_bf16_fastping64x256");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, uniform), "forward_e4m3_bf16_fastping64x256");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, uniform, true),
            "forward_e4m3_bf16_block_coop128x128");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, skewed(8), true),
            "forward_e4m3_bf16_block_staggercoop128x256_widestore");
  set_kernel_override("");
}

TEST(Sm90KernelSelection, OverrideWinsForItsRoleOnly) {
  set_kernel_override("forward_bf16_coop128x256");
  EXPECT_EQ(pick(Role::kForward, kBf16, kBf16, skewed(128)), "forward_bf16_coop128x256");
  EXPECT_EQ(pick(Role::kWgrad, kBf16, kBf16, std::vector<int64_t>(128, 256)),
            "wgrad_bf16_coop256x128");
  set_kernel_override("");
  EXPECT_EQ(pick(Role::kForward, kBf16, kBf16, skewed(128)), "forward_bf16_ping64x256");
  EXPECT_THROW(set_kernel_override("no_such_kernel"), Error);
  EXPECT_EQ(pick(Role::kForward, kBf16, kBf16, skewed(128)), "forward_bf16_ping64x256");
}

// A recipe's use_split_accumulator=False allows the fast-accumulation
// kernels; where none is built for the role and formats (E4M3 gradients,
// fp32 main_grad, blockwise scales) the promoting kernel runs. Without it a
// fast kernel never runs.
TEST(Sm90KernelSelection, FastAccumulationOnlyWhenAllowed) {
  constexpr DType kE4 = DType::kFloat8E4M3, kE5 = DType::kFloat8E5M2, kF32 = DType::kFloat32;
  const std::vector<int64_t> uniform(8, 2048), short_groups(128, 256);
  for (const auto& sizes : {uniform, short_groups, skewed(128)}) {
    EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, sizes).find("fast"), std::string::npos);
    EXPECT_EQ(pick_fp8(Role::kDgrad, kE5, kE4, kBf16, sizes).find("fast"), std::string::npos);
    EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, sizes).find("fast"), std::string::npos);
  }
  // The same tile rule as bf16: 64-row pingpong tiles where 128 pad badly.
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, uniform, false, true),
            "forward_e4m3_bf16_fastcoop128x256");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, skewed(128), false, true),
            "forward_e4m3_bf16_fastping64x256");
  EXPECT_EQ(pick_fp8(Role::kDgrad, kE5, kE4, kBf16, short_groups, false, true),
            "dgrad_e5m2_bf16_fastcoop128x256");
  EXPECT_EQ(pick_fp8(Role::kDgrad, kE5, kE4, kBf16, skewed(32), false, true),
            "dgrad_e5m2_bf16_fastping64x256");
  // wgrad: the wide-store kernel for short reductions (under 1024 rows per
  // group on average), except into an output it must add to; with longer
  // reductions the kernel that stores like the others.
  for (const auto& sizes : {short_groups, skewed(128), std::vector<int64_t>(32, 1023)}) {
    EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, sizes, false, true),
              "wgrad_e5m2_bf16_fastcoop256x128_widestore_overlap");
    EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, sizes, false, true, true),
              "wgrad_e5m2_bf16_fastcoop256x128");
  }
  for (const auto& sizes :
       {uniform, std::vector<int64_t>(32, 1024), std::vector<int64_t>{157, 4183, 2000, 1800}}) {
    EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, sizes, false, true),
              "wgrad_e5m2_bf16_fastcoop256x128");
    EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, sizes, false, true, true),
              "wgrad_e5m2_bf16_fastcoop256x128");
  }
  // The promoting wgrad: the wide store at every reduction length (it won
  // every tuning case), the regular one to accumulate.
  for (const auto& sizes : {uniform, short_groups, std::vector<int64_t>(32, 4096)}) {
    EXPECT_NE(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, sizes)
                  .find("wgrad_e5m2_bf16_halfcoop128x256_widestore"),
              std::string::npos);
    EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, sizes, false, false, true),
              "wgrad_e5m2_bf16_halfcoop128x256");
  }
  // No fast kernel built: the promoting one.
  EXPECT_EQ(pick_fp8(Role::kDgrad, kE4, kE4, kBf16, uniform, false, true),
            "dgrad_e4m3_bf16_coop128x128");
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kF32, uniform, false, true),
            "wgrad_e5m2_to_fp32_halfcoop128x256");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, uniform, true, true),
            "forward_e4m3_bf16_block_coop128x128");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, DType::kFloat16, uniform, false, true),
            "forward_e4m3_fp16_halfcoop128x256");
}

// The FP8 wide-store wgrads whose group switches do not wait for their
// stores: only where groups average under 1024 rows (a CTA's consecutive
// tiles then mostly belong to different groups), never to accumulate.
TEST(Sm90KernelSelection, ShortReductionsTakeTheOverlappedGroupSwitch) {
  constexpr DType kE4 = DType::kFloat8E4M3, kE5 = DType::kFloat8E5M2;
  for (const bool fast : {false, true}) {
    const std::string wide = fast ? "wgrad_e5m2_bf16_fastcoop256x128_widestore"
                                  : "wgrad_e5m2_bf16_halfcoop128x256_widestore";
    for (const auto& sizes : {std::vector<int64_t>(128, 256), skewed(128),
                              std::vector<int64_t>(32, 1023), std::vector<int64_t>{0, 0, 900}}) {
      EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, sizes, false, fast), wide + "_overlap");
      EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, sizes, false, fast, true).find("overlap"),
                std::string::npos);
    }
    // Device sizes: by the average too.
    EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, std::vector<int64_t>(128, 256), false, fast,
                       false, false),
              wide + "_overlap");
    for (const auto& sizes : {std::vector<int64_t>(32, 1024), std::vector<int64_t>(8, 2048)})
      EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, sizes, false, fast).find("overlap"),
                std::string::npos);
  }
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, std::vector<int64_t>(8, 2048)),
            "wgrad_e5m2_bf16_halfcoop128x256_widestore");
  // fp16 weights: the promoting fp16 copy, by the same rule.
  for (const bool fast : {false, true}) {
    EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, DType::kFloat16, std::vector<int64_t>(128, 256),
                       false, fast),
              "wgrad_e5m2_fp16_halfcoop128x256_widestore_overlap");
    EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, DType::kFloat16, std::vector<int64_t>(32, 1024),
                       false, fast),
              "wgrad_e5m2_fp16_halfcoop128x256_widestore");
  }
  // Other formats, outputs and scalings keep their kernels.
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE4, kE4, kBf16, std::vector<int64_t>(128, 256)),
            "wgrad_e4m3_bf16_coop128x128");
  EXPECT_EQ(pick(Role::kWgrad, kBf16, kBf16, std::vector<int64_t>(128, 256)),
            "wgrad_bf16_coop256x128");
}

// Tuning builds (GL_SM90_TUNING, which scripts/test.sh sets) list the
// candidates, which only an override runs: nothing chosen automatically
// changes with them.
TEST(Sm90KernelSelection, TuningCandidatesRunOnlyWhenForced) {
  const std::vector<std::string> candidates = {
      "wgrad_e5m2_bf16_fastcoop128x256",           "forward_e4m3_bf16_halfcoop128x256_widestore",
      "dgrad_e5m2_bf16_halfcoop128x256_widestore", "forward_bf16_coop128x256_widestore",
      "forward_e4m3_bf16_block_pipecoop128x128",   "dgrad_e4m3_bf16_block_pipecoop128x128"};
  int listed = 0;
  for (const KernelEntry& e : all_kernels())
    for (const std::string& c : candidates) listed += c == e.name;
  if (listed == 0) GTEST_SKIP() << "built without GL_SM90_TUNING";
  EXPECT_EQ(listed, static_cast<int>(candidates.size()));
  constexpr DType kE4 = DType::kFloat8E4M3, kE5 = DType::kFloat8E5M2;
  // Long reductions, where the candidate's 128-row tile would be preferred.
  const std::vector<int64_t> long_groups(32, 4096);
  for (const bool fast : {false, true}) {
    for (const auto& sizes : {std::vector<int64_t>(128, 256), skewed(128)})
      EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, sizes, false, fast),
                fast ? "wgrad_e5m2_bf16_fastcoop256x128_widestore_overlap"
                     : "wgrad_e5m2_bf16_halfcoop128x256_widestore_overlap");
    for (const auto& sizes : {std::vector<int64_t>(8, 2048), long_groups})
      EXPECT_EQ(
          pick_fp8(Role::kWgrad, kE5, kE4, kBf16, sizes, false, fast),
          fast ? "wgrad_e5m2_bf16_fastcoop256x128" : "wgrad_e5m2_bf16_halfcoop128x256_widestore");
  }
  EXPECT_EQ(pick(Role::kWgrad, kBf16, kBf16, std::vector<int64_t>(128, 256)),
            "wgrad_bf16_coop256x128");
  for (const auto& sizes : {std::vector<int64_t>(128, 256), std::vector<int64_t>(8, 2048)}) {
    EXPECT_EQ(pick_fp8(Role::kDgrad, kE5, kE4, kBf16, sizes), "dgrad_e5m2_bf16_halfcoop128x256");
    EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, DType::kFloat32, sizes),
              "wgrad_e5m2_to_fp32_halfcoop128x256");
  }
  // The wide-store forwards and dgrad are passed over unless forced.
  for (const auto& sizes : {std::vector<int64_t>(128, 256), std::vector<int64_t>(8, 2048)}) {
    EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, sizes),
              "forward_e4m3_bf16_halfcoop128x256");
    EXPECT_EQ(pick(Role::kForward, kBf16, kBf16, sizes), "forward_bf16_coop128x256");
  }
  set_kernel_override("forward_e4m3_bf16_halfcoop128x256_widestore");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, long_groups),
            "forward_e4m3_bf16_halfcoop128x256_widestore");
  set_kernel_override("dgrad_e5m2_bf16_halfcoop128x256_widestore");
  EXPECT_EQ(pick_fp8(Role::kDgrad, kE5, kE4, kBf16, long_groups),
            "dgrad_e5m2_bf16_halfcoop128x256_widestore");
  set_kernel_override("forward_bf16_coop128x256_widestore");
  EXPECT_EQ(pick(Role::kForward, kBf16, kBf16, long_groups), "forward_bf16_coop128x256_widestore");
  set_kernel_override("wgrad_e5m2_bf16_fastcoop128x256");
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, long_groups),
            "wgrad_e5m2_bf16_fastcoop128x256");
  // The pipelined blockwise promotion: blockwise scales only.
  set_kernel_override("forward_e4m3_bf16_block_pipecoop128x128");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, long_groups, true),
            "forward_e4m3_bf16_block_pipecoop128x128");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, long_groups),
            "forward_e4m3_bf16_halfcoop128x256");
  set_kernel_override("dgrad_e4m3_bf16_block_pipecoop128x128");
  EXPECT_EQ(pick_fp8(Role::kDgrad, kE4, kE4, kBf16, long_groups, true),
            "dgrad_e4m3_bf16_block_pipecoop128x128");
  // The override names E5M2 x E4M3 to bf16: other formats keep their kernel.
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE4, kE4, kBf16, long_groups), "wgrad_e4m3_bf16_coop128x128");
  set_kernel_override("");
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, kBf16, long_groups),
            "wgrad_e5m2_bf16_halfcoop128x256_widestore");
}

TEST(Sm90KernelSelection, NamesAreUniqueAndDescribeTheKernel) {
  const auto& kernels = all_kernels();
  ASSERT_GE(kernels.size(), 16u);
  for (size_t i = 0; i < kernels.size(); ++i) {
    const std::string name = kernels[i].name;
    EXPECT_EQ(name.rfind(role_name(kernels[i].role), 0), 0u) << name;
    EXPECT_NE(name.find(std::to_string(kernels[i].tile_m) + "x"), std::string::npos) << name;
    EXPECT_EQ(kernels[i].block_scaled, name.find("_block_") != std::string::npos) << name;
    EXPECT_EQ(kernels[i].fast_accumulation, name.find("_fast") != std::string::npos) << name;
    if (kernels[i].role != Role::kForward)  // the forward has a bias epilogue, no C
      EXPECT_EQ(kernels[i].reads_source, name.find("_widestore") == std::string::npos) << name;
    // FP8 kernels: role_format_output_..., "to_fp32" for the main_grad wgrads.
    if (kernels[i].input == DType::kFloat8E4M3 || kernels[i].input == DType::kFloat8E5M2) {
      const std::string output = kernels[i].output == DType::kBFloat16  ? "_bf16_"
                                 : kernels[i].output == DType::kFloat16 ? "_fp16_"
                                                                        : "_fp32_";
      EXPECT_NE(name.find(output), std::string::npos) << name;
    }
    for (size_t j = i + 1; j < kernels.size(); ++j) EXPECT_NE(name, kernels[j].name);
  }
}

// ---- where the block-scaled kernels read each group's scales ----------------
//
// The CPU quantizer (bit-identical to the CUDA one) writes the layouts of
// core/fp8/fp8_tensor.h. Each GEMM operand element is rebuilt here the way
// the kernel reads it: the code at the setup's per-group address, the scale
// at group_block_scales' offset + (row / granularity) * row_stride +
// (k / 128) * block_stride (the layout the setup gives CUTLASS), and must
// equal the dequantized copy.

// Every element of one operand [rows, depth]: code index code_at(row, kk),
// against expected(row, kk).
template <class CodeAt, class Expected>
void expect_operand(const std::string& what, int64_t rows, int64_t depth, const gl_test::Buf& codes,
                    const gl_test::Buf& scales, int64_t offset, int64_t row_stride,
                    int64_t block_stride, int granularity, CodeAt code_at, Expected expected) {
  const int64_t code_count = static_cast<int64_t>(codes.size());
  const int64_t scale_count = static_cast<int64_t>(scales.size() / sizeof(float));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kk = 0; kk < depth; ++kk) {
      const int64_t c = code_at(r, kk),
                    s = offset + r / granularity * row_stride + kk / 128 * block_stride;
      ASSERT_TRUE(c >= 0 && c < code_count && s >= 0 && s < scale_count)
          << what << ": code " << c << " or scale " << s << " out of bounds";
      const float value = grouped_linear::fp8::from_fp8(codes.host[static_cast<size_t>(c)],
                                                        grouped_linear::fp8::Format::kE4M3) *
                          scales.f(static_cast<size_t>(s));
      ASSERT_EQ(value, expected(r, kk)) << what << ": row " << r << ", k " << kk;
    }
}

TEST(Sm90BlockScales, EveryGroupReadsItsOwnScales) {
  namespace fp8 = grouped_linear::fp8;
  const uint32_t seed = gl_test::seed_for(gl_test::current_test_name());
  SCOPED_TRACE(gl_test::seed_message(seed));
  std::mt19937 rng(seed);
  const Device cpu{};
  const ExecContext ctx{};
  // K and N not multiples of 128; groups of one and several 128-row blocks,
  // ending on and off a block boundary, and an empty one.
  const std::vector<int64_t> sizes = {130, 0, 256, 1, 313};
  const int64_t groups = 5, t = 700, k = 200, n = 272;
  gl_test::ActivationCase x, dy;
  x.spec = {"X", t, k, groups, 0};
  dy.spec = {"dY", t, n, groups, 0};
  gl_test::HostTensor x_rows = gl_test::HostTensor::matrix(DType::kFloat32, t, k), x_cols = x_rows;
  gl_test::HostTensor dy_rows = gl_test::HostTensor::matrix(DType::kFloat32, t, n),
                      dy_cols = dy_rows;
  for (auto [a, rows, cols] :
       {std::tuple{&x, &x_rows, &x_cols}, std::tuple{&dy, &dy_rows, &dy_cols}}) {
    a->kind = fp8::RecipeKind::kBlock;
    a->power_2 = true;
    a->with_dbias = a->with_amax = false;
    a->make(rng, gl_test::Split::kRandomWithEmpty, /*specials=*/false);
    a->sizes = sizes;
    fp8::quantize_activation(a->request(false, cpu), ctx);
    fp8::dequantize_activation(a->quantized(false, cpu), false, a->splits(false),
                               rows->matrix_view(), ctx);
    fp8::dequantize_activation(a->quantized(false, cpu), true, a->splits(false),
                               cols->matrix_view(), ctx);
  }
  gl_test::WeightCase w;
  w.spec = {"W", groups, n, k, 0};
  w.kind = fp8::RecipeKind::kBlock;
  w.power_2 = true;
  w.with_amax = false;
  w.make(rng, /*specials=*/false);
  fp8::quantize_weight(w.request(false, cpu), ctx);
  gl_test::HostTensor w_values(DType::kFloat32, groups, n, k);
  fp8::dequantize_weight(w.quantized(false, cpu), false, w_values.grouped_view(), ctx);
  const int64_t padded = x.col_stride;
  ASSERT_EQ(dy.col_stride, padded);

  // The setup's scan: each group's first row, column-wise column and scale block.
  int64_t begin = 0, column = 0, block = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t m = sizes[static_cast<size_t>(g)];
    const std::string group = " of group " + std::to_string(g);
    // fwd: A = X rows [m, K], B = W_g [N, K] in 128 x 128 blocks.
    GroupBlockScales s = group_block_scales(Role::kForward, g, begin, block, n, k, t);
    expect_operand(
        "fwd A" + group, m, k, x.row, x.row_scale, s.a_offset, s.a_row_stride, s.a_block_stride, 1,
        [&](int64_t r, int64_t kk) { return (begin + r) * k + kk; },
        [&](int64_t r, int64_t kk) { return x_rows.at(begin + r, kk); });
    expect_operand(
        "fwd B" + group, n, k, w.row, w.row_scale, s.b_offset, s.b_row_stride, s.b_block_stride,
        128, [&](int64_t c, int64_t kk) { return (g * n + c) * k + kk; },
        [&](int64_t c, int64_t kk) { return w_values.at(g, c, kk); });
    // dgrad: A = dY rows [m, N], B = W_gᵀ [K, N] (the column-wise copy).
    s = group_block_scales(Role::kDgrad, g, begin, block, n, k, t);
    expect_operand(
        "dgrad A" + group, m, n, dy.row, dy.row_scale, s.a_offset, s.a_row_stride, s.a_block_stride,
        1, [&](int64_t r, int64_t kk) { return (begin + r) * n + kk; },
        [&](int64_t r, int64_t kk) { return dy_rows.at(begin + r, kk); });
    expect_operand(
        "dgrad B" + group, k, n, w.col, w.col_scale, s.b_offset, s.b_row_stride, s.b_block_stride,
        128, [&](int64_t c, int64_t kk) { return (g * k + c) * n + kk; },
        [&](int64_t c, int64_t kk) { return w_values.at(g, kk, c); });
    // wgrad: A = dY_gᵀ [N, m], B = X_gᵀ [K, m], the group's columns of the
    // column-wise copies.
    s = group_block_scales(Role::kWgrad, g, begin, block, n, k, t);
    expect_operand(
        "wgrad A" + group, n, m, dy.col, dy.col_scale, s.a_offset, s.a_row_stride, s.a_block_stride,
        1, [&](int64_t r, int64_t kk) { return r * padded + column + kk; },
        [&](int64_t r, int64_t kk) { return dy_cols.at(begin + kk, r); });
    expect_operand(
        "wgrad B" + group, k, m, x.col, x.col_scale, s.b_offset, s.b_row_stride, s.b_block_stride,
        1, [&](int64_t c, int64_t kk) { return c * padded + column + kk; },
        [&](int64_t c, int64_t kk) { return x_cols.at(begin + kk, c); });
    begin += m;
    column += fp8::round_up(m, fp8::kGroupAlign);
    block += (m + 127) / 128;
  }
}

}  // namespace
}  // namespace grouped_linear::cuda::sm90
