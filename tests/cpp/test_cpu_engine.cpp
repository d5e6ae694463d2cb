// The CPU reference engine against the float64 reference: every role, every
// dtype, shapes with odd K and N, no rows, one group, strided views, random
// group sizes with empty groups and one group holding every row.
#include <gtest/gtest.h>

#include <random>

#include "core/cpu/cpu_engine.h"
#include "test_util.h"

namespace gl_test {
namespace {

using grouped_linear::ExecContext;
using grouped_linear::GroupedGemmEngine;

class CpuEngineTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    seed_ = seed_for(current_test_name());
    rng_.seed(seed_);
  }
  GroupedGemmEngine& engine() { return grouped_linear::cpu::reference_engine(); }

  void run_wgrad(WgradMode mode) {
    SCOPED_TRACE(seed_message(seed_));
    WgradData d = make_wgrad(GetParam(), mode, rng_);
    engine().wgrad(d.problem(), ExecContext{});
    d.check(d.dw, d.db);
  }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
};

TEST_P(CpuEngineTest, ForwardWithoutBias) {
  SCOPED_TRACE(seed_message(seed_));
  ForwardData d = make_forward(GetParam(), /*with_bias=*/false, rng_);
  engine().forward(d.problem(), ExecContext{});
  d.check(d.y);
}

TEST_P(CpuEngineTest, ForwardWithBias) {
  SCOPED_TRACE(seed_message(seed_));
  ForwardData d = make_forward(GetParam(), /*with_bias=*/true, rng_);
  engine().forward(d.problem(), ExecContext{});
  d.check(d.y);
}

TEST_P(CpuEngineTest, Dgrad) {
  SCOPED_TRACE(seed_message(seed_));
  DgradData d = make_dgrad(GetParam(), rng_);
  engine().dgrad(d.problem(), ExecContext{});
  d.check(d.dx);
}

TEST_P(CpuEngineTest, WgradWrite) { run_wgrad(WgradMode::kDw); }
TEST_P(CpuEngineTest, WgradWriteWithBiasGrad) { run_wgrad(WgradMode::kDwAndDbias); }
TEST_P(CpuEngineTest, WgradBiasGradOnly) { run_wgrad(WgradMode::kDbiasOnly); }
TEST_P(CpuEngineTest, WgradAccumulate) { run_wgrad(WgradMode::kAccumulate); }
TEST_P(CpuEngineTest, WgradAccumulateWithBiasGrad) { run_wgrad(WgradMode::kAccumulateDbias); }

INSTANTIATE_TEST_SUITE_P(Cases, CpuEngineTest, ::testing::ValuesIn(all_cases()), case_param_name);

// The same call twice gives bit-identical outputs: the reference is
// deterministic, which the CUDA tests rely on when they compare against it.
TEST(CpuEngine, Deterministic) {
  const uint32_t seed = seed_for(current_test_name());
  SCOPED_TRACE(seed_message(seed));
  std::mt19937 rng(seed);
  const Case c{{DType::kBFloat16, DType::kBFloat16}, test_shapes()[0], Split::kRandomWithEmpty};
  ForwardData d = make_forward(c, /*with_bias=*/true, rng);
  auto& engine = grouped_linear::cpu::reference_engine();
  engine.forward(d.problem(), ExecContext{});
  const HostTensor first = d.y;
  d.y.poison();
  engine.forward(d.problem(), ExecContext{});
  for (int64_t i = 0; i < d.y.storage_elements(); ++i)
    ASSERT_EQ(d.y.bits_at(i), first.bits_at(i)) << "element " << i;
}

// Outputs are written in the output dtype with one rounding of the float32
// accumulator: a float16 forward equals the float32 forward rounded to float16.
TEST(CpuEngine, HalfOutputIsRoundedFloatOutput) {
  const uint32_t seed = seed_for(current_test_name());
  SCOPED_TRACE(seed_message(seed));
  std::mt19937 rng(seed);
  const Case c{{DType::kFloat16, DType::kFloat16}, test_shapes()[0], Split::kRandomWithEmpty};
  ForwardData d = make_forward(c, /*with_bias=*/false, rng);
  HostTensor y32 = HostTensor::matrix(DType::kFloat32, d.y.rows(), d.y.cols());
  auto& engine = grouped_linear::cpu::reference_engine();
  engine.forward(d.problem(), ExecContext{});
  ForwardProblem p32 = d.problem();
  p32.y = y32.matrix_view();
  engine.forward(p32, ExecContext{});
  for (int64_t r = 0; r < d.y.rows(); ++r)
    for (int64_t col = 0; col < d.y.cols(); ++col)
      ASSERT_EQ(d.y.at(r, col), round_to(DType::kFloat16, static_cast<float>(y32.at(r, col))))
          << "row " << r << " col " << col;
}

}  // namespace
}  // namespace gl_test
