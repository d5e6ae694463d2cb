// FP8 through the C++ API (grouped_linear/fp8.h), on the CPU engine's
// emulation: the products against float64 products of the quantized
// operands, autocast regions, the weight cache across micro-batches, the FP8
// state in checkpoints (and bad ones refused), save_original_input, bad
// recipes and check mode.
//
// The quantized operands are rebuilt here with torch's own FP8 casts:
// per-tensor scale fp8_max / amax (current scaling; one scale per expert's
// weight), codes cast with round-to-nearest-even, values codes / scale.
// Against them the library's float32 accumulation over K <= 48 errs by about
// 1e-7 relative, so 1e-5 (relative Frobenius) checks every operand, scale
// and format; the FP8 rounding itself is ~1e-2, so a product that skipped
// the quantization fails too (checked directly below).
#include <grouped_linear/grouped_linear.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "reference.h"

namespace gl = grouped_linear;

namespace {

constexpr double kE4M3Max = 448.0, kE5M2Max = 57344.0;

torch::Tensor quantized(const torch::Tensor& t, torch::Dtype format, double format_max) {
  const torch::Tensor scale = torch::full({}, format_max, torch::kFloat) / t.abs().max();
  return (t * scale).to(format).to(torch::kFloat) * (1 / scale);
}

// Each expert's weight with its own scale.
torch::Tensor quantized_weights(const torch::Tensor& w) {
  std::vector<torch::Tensor> experts;
  for (const torch::Tensor& expert : w.unbind(0))
    experts.push_back(quantized(expert, torch::kFloat8_e4m3fn, kE4M3Max));
  return torch::stack(experts);
}

double relative_error(const torch::Tensor& actual, const torch::Tensor& expected) {
  const torch::Tensor e = expected.to(torch::kDouble);
  return ((actual.to(torch::kDouble) - e).norm() / e.norm()).item<double>();
}

gl::GroupedLinear make_experts(int64_t g, int64_t in, int64_t out) {
  gl::GroupedLinear m(
      gl::GroupedLinearOptions(g, in, out).params_dtype(torch::kFloat).device(torch::kCPU));
  torch::NoGradGuard no_grad;
  m->bias.normal_();
  return m;
}

class CppApiFp8 : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(4321); }
  void TearDown() override { gl::set_fp8_amax_check(false); }
};

TEST_F(CppApiFp8, CurrentScalingMatchesFloat64OfQuantizedOperands) {
  const std::vector<int64_t> splits{7, 0, 12, 5};  // an empty expert included
  gl::GroupedLinear m = make_experts(4, 48, 32);
  const torch::Tensor x = torch::randn({24, 48}).requires_grad_();
  const torch::Tensor dy = torch::randn({24, 32});
  torch::Tensor y;
  {
    gl::Fp8Autocast fp8(gl::Float8CurrentScaling{});
    y = m->forward(x, splits);
  }
  y.backward(dy);

  const torch::Tensor w = m->weight.detach();
  // HYBRID: E4M3 for X and W, E5M2 for dY; X keeps its forward scale for wgrad.
  const torch::Tensor xq = quantized(x.detach(), torch::kFloat8_e4m3fn, kE4M3Max);
  const torch::Tensor dyq = quantized(dy, torch::kFloat8_e5m2, kE5M2Max);
  const gl::test::Reference q =
      gl::test::reference(xq, quantized_weights(w), m->bias.detach(), splits, dyq);
  EXPECT_LE(relative_error(y, q.y), 1e-5);
  EXPECT_LE(relative_error(x.grad(), q.dx), 1e-5);
  EXPECT_LE(relative_error(m->weight.grad(), q.dw), 1e-5);
  // The bias gradient is summed from the unquantized dY.
  const torch::Tensor db = torch::stack({dy.narrow(0, 0, 7).sum(0), torch::zeros({32}),
                                         dy.narrow(0, 7, 12).sum(0), dy.narrow(0, 19, 5).sum(0)});
  EXPECT_LE(relative_error(m->bias.grad(), db), 1e-6);
  EXPECT_TRUE(torch::equal(m->weight.grad()[1], torch::zeros({32, 48})));

  // FP8 really ran: the unquantized product is farther off than the
  // tolerance above, and within the E4M3 rounding bound.
  const gl::test::Reference exact =
      gl::test::reference(x.detach(), w, m->bias.detach(), splits, dy);
  const double fp8_error = relative_error(y, exact.y);
  EXPECT_GT(fp8_error, 1e-4);
  EXPECT_LT(fp8_error, 0.0625);
}

// save_original_input keeps X for backward and casts it there with the
// input's scale as it is then. Current scaling: the same amax, the same
// scale, so only what is saved changes, not the gradients. Delayed scaling:
// the region's exit has moved the scale (from 1 to one fitted to X's amax)
// before backward, so the weight gradient differs from the one of the FP8
// copy made in forward, while staying within FP8 rounding of it.
TEST_F(CppApiFp8, SaveOriginalInputCastsTheInputInBackward) {
  const std::vector<int64_t> splits{5, 6};
  const torch::Tensor x = torch::randn({11, 32});
  const torch::Tensor dy = torch::randn({11, 16});
  for (const bool delayed : {false, true}) {
    gl::GroupedLinear copy = make_experts(2, 32, 16);
    gl::GroupedLinear original(
        gl::GroupedLinearOptions(2, 32, 16).save_original_input(true).device(torch::kCPU));
    original->load_expert_state_dict(copy->expert_state_dict());
    for (gl::GroupedLinear* m : {&copy, &original}) {
      torch::Tensor y;
      {
        gl::Fp8Autocast fp8(delayed ? gl::Fp8Recipe(gl::DelayedScaling{})
                                    : gl::Fp8Recipe(gl::Float8CurrentScaling{}));
        y = (*m)->forward(x.clone().requires_grad_(), splits);
      }
      y.backward(dy);
    }
    EXPECT_TRUE(torch::equal(original->bias.grad(), copy->bias.grad()));
    if (delayed) {
      EXPECT_FALSE(torch::equal(original->weight.grad(), copy->weight.grad()));
      EXPECT_LT(relative_error(original->weight.grad(), copy->weight.grad()), 0.1);
    } else {
      EXPECT_TRUE(torch::equal(original->weight.grad(), copy->weight.grad()));
    }
  }
}

TEST_F(CppApiFp8, RegionsNestAndFp8IsOffOutside) {
  gl::GroupedLinear m = make_experts(2, 16, 16);
  const torch::Tensor x = torch::randn({9, 16});
  const std::vector<int64_t> splits{4, 5};
  EXPECT_FALSE(gl::fp8_autocast_enabled());
  torch::Tensor inside, nested_off;
  {
    gl::Fp8Autocast outer(gl::Float8CurrentScaling{});
    EXPECT_TRUE(gl::fp8_autocast_enabled());
    inside = m->forward(x, splits);
    {
      gl::Fp8Autocast inner(gl::Float8CurrentScaling{}, /*enabled=*/false);
      EXPECT_FALSE(gl::fp8_autocast_enabled());
      nested_off = m->forward(x, splits);
    }
    EXPECT_TRUE(gl::fp8_autocast_enabled());
  }
  EXPECT_FALSE(gl::fp8_autocast_enabled());
  const torch::Tensor outside = m->forward(x, splits);
  const torch::Tensor exact =
      gl::test::reference(x, m->weight.detach(), m->bias.detach(), splits, torch::zeros({9, 16})).y;
  EXPECT_LE(relative_error(outside, exact), 1e-6);
  EXPECT_LE(relative_error(nested_off, exact), 1e-6);
  EXPECT_GT(relative_error(inside, exact), 1e-4);
}

TEST_F(CppApiFp8, WeightsQuantizedOnFirstMicrobatchAreReused) {
  gl::GroupedLinear m = make_experts(2, 32, 16);
  const torch::Tensor x = torch::randn({8, 32});
  const std::vector<int64_t> splits{3, 5};
  torch::NoGradGuard no_grad;
  gl::Fp8Autocast fp8(gl::Float8CurrentScaling{});
  const torch::Tensor first = m->forward(x, splits, /*is_first_microbatch=*/true);
  m->weight.add_(1.0);  // the optimizer's step would come later; the cache must win
  EXPECT_TRUE(torch::equal(m->forward(x, splits, false), first));
  EXPECT_FALSE(torch::equal(m->forward(x, splits), first));  // unset: quantized again
}

TEST_F(CppApiFp8, DelayedScalingStateTravelsWithCheckpoints) {
  gl::DelayedScaling recipe;
  recipe.amax_history_len = 4;
  gl::GroupedLinear trained = make_experts(3, 32, 16);
  const std::vector<int64_t> splits{6, 0, 10};
  for (int step = 0; step < 2; ++step) {
    gl::Fp8Autocast fp8(recipe);
    trained->forward(torch::randn({16, 32}).requires_grad_(), splits).sum().backward();
  }
  std::stringstream buffer;
  torch::save(trained, buffer);
  torch::serialize::InputArchive archive;
  buffer.seekg(0);
  archive.load_from(buffer);
  torch::Tensor saved_state;
  ASSERT_TRUE(archive.try_read("_extra_state", saved_state));
  EXPECT_GT(saved_state.numel(), 6);  // the header and the delayed-scaling buffers

  gl::GroupedLinear loaded = make_experts(3, 32, 16);
  buffer.seekg(0);
  torch::load(loaded, buffer);
  gl::GroupedLinear weights_only = make_experts(3, 32, 16);  // no FP8 history
  weights_only->load_expert_state_dict(trained->expert_state_dict());

  const torch::Tensor x = torch::randn({16, 32});
  torch::NoGradGuard no_grad;
  gl::Fp8Autocast fp8(recipe);
  const torch::Tensor expected = trained->forward(x, splits);
  EXPECT_TRUE(torch::equal(loaded->forward(x, splits), expected));
  EXPECT_FALSE(torch::equal(weights_only->forward(x, splits), expected));
}

TEST_F(CppApiFp8, BadFp8StateInACheckpointIsRefusedBeforeAnyChange) {
  gl::GroupedLinear saved = make_experts(3, 16, 8);
  gl::GroupedLinear four_experts = make_experts(4, 16, 8);  // its state is for 4 groups
  torch::serialize::OutputArchive four_archive;
  four_experts->save(four_archive);
  torch::Tensor four_state;
  {
    std::stringstream buffer;
    four_archive.save_to(buffer);
    torch::serialize::InputArchive in;
    in.load_from(buffer);
    ASSERT_TRUE(in.try_read("_extra_state", four_state));
  }
  for (const auto& [state, needle] : std::vector<std::pair<torch::Tensor, std::string>>{
           {torch::zeros({3}), "_extra_state: 3"}, {four_state, "saved for 4"}}) {
    torch::serialize::OutputArchive bad;
    for (const auto& item : saved->expert_state_dict()) bad.write(item.key(), item.value());
    bad.write("_extra_state", state);
    std::stringstream buffer;
    bad.save_to(buffer);
    gl::GroupedLinear target = make_experts(3, 16, 8);
    const torch::Tensor before = target->weight.detach().clone();
    torch::serialize::InputArchive in;
    in.load_from(buffer);
    try {
      target->load(in);
      ADD_FAILURE() << "no exception for " << needle;
    } catch (const c10::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_TRUE(torch::equal(target->weight, before)) << needle;  // nothing was copied
    EXPECT_EQ(target->forward(torch::randn({4, 16}), {1, 1, 2}).sizes(),
              (std::vector<int64_t>{4, 8}));
  }
}

TEST_F(CppApiFp8, BadRecipeNamesTheFieldAndChangesNothing) {
  gl::GroupedLinear m = make_experts(2, 16, 8);
  gl::DelayedScaling history;
  history.amax_history_len = 0;
  gl::DelayedScaling margin;
  margin.margin = -1;
  gl::DelayedScaling algo;
  algo.amax_compute_algo = "mean";
  gl::DelayedScaling format;
  format.fp8_format = static_cast<gl::Fp8Format>(7);  // not an enumerator
  const std::vector<std::pair<gl::DelayedScaling, std::string>> cases{{history, "amax_history_len"},
                                                                      {margin, "margin"},
                                                                      {algo, "amax_compute_algo"},
                                                                      {format, "fp8_format"}};
  for (const auto& [recipe, field] : cases) {
    try {
      gl::Fp8Autocast fp8(recipe);
      ADD_FAILURE() << "no exception for a bad " << field;
    } catch (const c10::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
    EXPECT_FALSE(gl::fp8_autocast_enabled()) << field;
  }
  const torch::Tensor x = torch::randn({5, 16});
  const torch::Tensor y = m->forward(x, {2, 3});
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{5, 8}));
}

TEST_F(CppApiFp8, CheckModeRaisesAtTheStepBoundaryAndModuleKeepsWorking) {
  gl::GroupedLinear m = make_experts(2, 16, 8);
  const std::vector<int64_t> splits{2, 3};
  torch::Tensor x = torch::randn({5, 16});
  x[0][0] = std::numeric_limits<float>::infinity();
  gl::set_fp8_amax_check(true);
  bool raised = false;
  try {
    gl::Fp8Autocast fp8(gl::DelayedScaling{});
    m->forward(x, splits);
  } catch (const c10::ValueError& e) {  // from the region's destructor
    raised = true;
    const std::string message = e.what();
    EXPECT_NE(message.find("GroupedLinear: amax of input is inf"), std::string::npos) << message;
  }
  EXPECT_TRUE(raised);
  EXPECT_FALSE(gl::fp8_autocast_enabled());
  gl::set_fp8_amax_check(false);
  torch::Tensor y;
  {
    gl::Fp8Autocast fp8(gl::DelayedScaling{});
    y = m->forward(torch::randn({5, 16}), splits);
  }
  EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
}

TEST_F(CppApiFp8, LinearAndAnyModuleWithTheDefaultArgument) {
  gl::Linear linear(gl::LinearOptions(24, 8).device(torch::kCPU));
  const torch::Tensor x = torch::randn({6, 24});
  torch::Tensor y;
  {
    gl::Fp8Autocast fp8(gl::Float8CurrentScaling{});
    y = linear->forward(x);
  }
  const torch::Tensor w = linear->weight.detach().unsqueeze(0);
  const torch::Tensor xq = quantized(x, torch::kFloat8_e4m3fn, kE4M3Max);
  const gl::test::Reference q = gl::test::reference(
      xq, quantized_weights(w), linear->bias.detach().unsqueeze(0), {6}, torch::zeros({6, 8}));
  EXPECT_LE(relative_error(y, q.y), 1e-5);

  // forward's third argument has a default: AnyModule and Sequential call it with two.
  gl::GroupedLinear experts = make_experts(2, 24, 8);
  torch::nn::AnyModule any(experts);
  const torch::Tensor via_any = any.forward(x, gl::MSplits({2, 4}));
  EXPECT_TRUE(torch::equal(via_any, experts->forward(x, {2, 4})));
}

}  // namespace
