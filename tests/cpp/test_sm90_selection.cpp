// Which sm90 kernel the engine picks per problem (sm90/kernel_table.cpp).
// Host logic only, so it runs without a GPU: CI checks the rule itself, the
// GPU tests check every kernel's numerics.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/cuda/sm90/grouped_gemm_sm90.h"
#include "core/error.h"

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

std::string pick_fp8(Role role, DType a, DType b, DType out, const std::vector<int64_t>& sizes) {
  GroupShape shape;
  shape.num_groups = static_cast<int>(sizes.size());
  for (int64_t s : sizes) shape.total_rows += s;
  shape.host_sizes = sizes.data();
  shape.n = 1536;
  shape.k = 2048;
  const KernelEntry* e = select_kernel(role, a, b, out, shape);
  return e == nullptr ? "none" : e->name;
}

TEST(Sm90KernelSelection, Fp8KernelsMatchBothOperandFormats) {
  constexpr DType kE4 = DType::kFloat8E4M3, kE5 = DType::kFloat8E5M2;
  const std::vector<int64_t> uniform(8, 2048);
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, uniform), "forward_e4m3_bf16_coop128x256");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kE4, kBf16, skewed(128)), "forward_e4m3_bf16_ping64x256");
  // HYBRID: E5M2 gradients times E4M3 weights / activations.
  EXPECT_EQ(pick_fp8(Role::kDgrad, kE5, kE4, kBf16, uniform), "dgrad_e5m2_bf16_coop128x256");
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE5, kE4, DType::kFloat32, uniform),
            "wgrad_e5m2_to_fp32_coop128x256");
  EXPECT_EQ(pick_fp8(Role::kWgrad, kE4, kE4, kBf16, std::vector<int64_t>(128, 256)),
            "wgrad_e4m3_bf16_coop128x256");
  // No E5M2 weights, no E5M2 forward, no mixed 16-bit / FP8 operands.
  EXPECT_EQ(pick_fp8(Role::kDgrad, kE4, kE5, kBf16, uniform), "none");
  EXPECT_EQ(pick_fp8(Role::kForward, kE5, kE4, kBf16, uniform), "none");
  EXPECT_EQ(pick_fp8(Role::kForward, kE4, kBf16, kBf16, uniform), "none");
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

TEST(Sm90KernelSelection, NamesAreUniqueAndDescribeTheKernel) {
  const auto& kernels = all_kernels();
  ASSERT_GE(kernels.size(), 16u);
  for (size_t i = 0; i < kernels.size(); ++i) {
    const std::string name = kernels[i].name;
    EXPECT_EQ(name.rfind(role_name(kernels[i].role), 0), 0u) << name;
    EXPECT_NE(name.find(std::to_string(kernels[i].tile_m) + "x"), std::string::npos) << name;
    for (size_t j = i + 1; j < kernels.size(); ++j) EXPECT_NE(name, kernels[j].name);
  }
}

}  // namespace
}  // namespace grouped_linear::cuda::sm90
