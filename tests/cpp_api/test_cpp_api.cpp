// The C++ API against a float64 reference: forward and all gradients with
// random group sizes (empty groups included), bad input (c10 errors naming
// the argument; the module keeps working), initialization and options,
// checkpoint naming (per-expert keys through torch::save / torch::load).
#include <grouped_linear/grouped_linear.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "reference.h"

namespace gl = grouped_linear;

namespace {

// Random group sizes summing to `rows`, with `empty` of the groups at zero.
std::vector<int64_t> random_splits(int64_t groups, int64_t rows, int64_t empty) {
  std::vector<int64_t> splits(groups, 0);
  const torch::Tensor order = torch::randperm(groups);
  const int64_t filled = groups - empty;
  int64_t left = rows;
  for (int64_t i = 0; i < filled; ++i) {
    const int64_t g = order[i].item<int64_t>();
    const int64_t take = i + 1 == filled ? left : torch::randint(left + 1, {1}).item<int64_t>();
    splits[g] = take;
    left -= take;
  }
  return splits;
}

void expect_close(const torch::Tensor& actual, const torch::Tensor& expected, double tol,
                  const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what << " is undefined";
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  if (expected.numel() == 0) return;
  const double err = (actual.to(torch::kDouble) - expected).abs().max().item<double>();
  const double scale = std::max(1.0, expected.abs().max().item<double>());
  EXPECT_LE(err, tol * scale) << what << ": max abs error " << err;
}

// Runs `fn`, expects an exception of type E whose message contains every
// piece of `needles`.
template <typename E>
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one mentioning " << needles.front();
  } catch (const E& e) {
    const std::string message = e.what();
    for (const std::string& needle : needles)
      EXPECT_NE(message.find(needle), std::string::npos)
          << "'" << needle << "' not in: " << message;
  }
}

gl::GroupedLinear make_experts(int64_t g, int64_t in, int64_t out, bool bias = true,
                               torch::Dtype dtype = torch::kFloat) {
  gl::GroupedLinear m(
      gl::GroupedLinearOptions(g, in, out).bias(bias).params_dtype(dtype).device(torch::kCPU));
  // Non-zero biases so that the bias really is checked.
  if (bias) {
    torch::NoGradGuard no_grad;
    m->bias.normal_();
  }
  return m;
}

// Forward + backward of `m` against the float64 reference.
void check_against_reference(gl::GroupedLinear& m, const std::vector<int64_t>& splits, double tol,
                             bool splits_as_tensor = false) {
  int64_t rows = 0;
  for (int64_t s : splits) rows += s;
  const torch::Dtype dtype = m->weight.scalar_type();
  const torch::Tensor x = torch::randn({rows, m->options.in_features()}).to(dtype).requires_grad_();
  const torch::Tensor dy = torch::randn({rows, m->options.out_features()}).to(dtype);
  m->zero_grad();
  const torch::Tensor y = splits_as_tensor ? m->forward(x, torch::tensor(splits, torch::kInt32))
                                           : m->forward(x, splits);
  y.backward(dy);
  const gl::test::Reference r =
      gl::test::reference(x.detach(), m->weight.detach(), m->bias, splits, dy);
  expect_close(y, r.y, tol, "y");
  expect_close(x.grad(), r.dx, tol, "dx");
  expect_close(m->weight.grad(), r.dw, tol, "dw");
  if (m->options.bias()) {
    expect_close(m->bias.grad(), r.db, tol, "db");
  }
}

class CppApi : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(1234); }
};

TEST_F(CppApi, ForwardBackwardMatchFloat64ReferenceWithEmptyGroups) {
  for (int trial = 0; trial < 4; ++trial) {
    const int64_t g = 3 + trial * 2, in = 16 + trial * 5, out = 8 + trial * 3;
    gl::GroupedLinear m = make_experts(g, in, out, /*bias=*/trial % 2 == 0);
    const std::vector<int64_t> splits = random_splits(g, 40 + 17 * trial, /*empty=*/1 + trial % 2);
    SCOPED_TRACE("trial " + std::to_string(trial));
    check_against_reference(m, splits, 1e-5);
    check_against_reference(m, splits, 1e-5, /*splits_as_tensor=*/true);
  }
}

TEST_F(CppApi, EmptyGroupsGetZeroGradients) {
  gl::GroupedLinear m = make_experts(4, 8, 6);
  check_against_reference(m, {5, 0, 7, 0}, 1e-5);
  EXPECT_EQ(m->weight.grad()[1].abs().max().item<float>(), 0.f);
  EXPECT_EQ(m->bias.grad()[3].abs().max().item<float>(), 0.f);
  // All rows empty: output [0, out], zero gradients.
  check_against_reference(m, {0, 0, 0, 0}, 0);
}

TEST_F(CppApi, HalfPrecisionWithinRounding) {
  for (torch::Dtype dtype : {torch::kBFloat16, torch::kHalf}) {
    gl::GroupedLinear m = make_experts(3, 32, 24, true, dtype);
    check_against_reference(m, random_splits(3, 50, 1), dtype == torch::kBFloat16 ? 3e-2 : 5e-3);
  }
}

TEST_F(CppApi, LeadingDimensionsAndInt64TensorSplits) {
  gl::GroupedLinear m = make_experts(2, 4, 3);
  const torch::Tensor x = torch::randn({2, 5, 4});
  const torch::Tensor y = m(x, torch::tensor({6, 4}, torch::kInt64));
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{2, 5, 3}));
  const gl::test::Reference r = gl::test::reference(
      x.reshape({10, 4}), m->weight.detach(), m->bias.detach(), {6, 4}, torch::zeros({10, 3}));
  expect_close(y.reshape({10, 3}), r.y, 1e-5, "y");
}

TEST_F(CppApi, LinearMatchesReference) {
  gl::Linear lin(gl::LinearOptions(12, 7).device(torch::kCPU));
  {
    torch::NoGradGuard no_grad;
    lin->bias.normal_();
  }
  EXPECT_EQ(lin->weight.sizes(), (std::vector<int64_t>{7, 12}));
  EXPECT_EQ(lin->bias.sizes(), (std::vector<int64_t>{7}));
  const torch::Tensor x = torch::randn({3, 4, 12}, torch::requires_grad());
  const torch::Tensor dy = torch::randn({3, 4, 7});
  const torch::Tensor y = lin(x);
  y.backward(dy);
  const gl::test::Reference r =
      gl::test::reference(x.detach().reshape({12, 12}), lin->weight.detach().unsqueeze(0),
                          lin->bias.detach().unsqueeze(0), {12}, dy.reshape({12, 7}));
  expect_close(y.reshape({12, 7}), r.y, 1e-5, "y");
  expect_close(x.grad().reshape({12, 12}), r.dx, 1e-5, "dx");
  expect_close(lin->weight.grad(), r.dw[0], 1e-5, "dw");
  expect_close(lin->bias.grad(), r.db[0], 1e-5, "db");
}

TEST_F(CppApi, OnlyNeededGradientsAndNoGraphUnderNoGrad) {
  gl::GroupedLinear m = make_experts(2, 5, 4);
  m->bias.set_requires_grad(false);
  const torch::Tensor x = torch::randn({6, 5});  // no grad for the input
  m(x, std::vector<int64_t>{2, 4}).sum().backward();
  EXPECT_TRUE(m->weight.grad().defined());
  EXPECT_FALSE(m->bias.grad().defined());
  torch::NoGradGuard no_grad;
  EXPECT_FALSE(m(x, std::vector<int64_t>{2, 4}).requires_grad());
}

TEST_F(CppApi, FusedWgradAccumulationAddsIntoMainGrad) {
  gl::GroupedLinear m(
      gl::GroupedLinearOptions(3, 6, 5).fuse_wgrad_accumulation(true).device(torch::kCPU));
  const std::vector<int64_t> splits{4, 0, 3};
  const torch::Tensor x = torch::randn({7, 6});
  // Without main_grad the forward names it.
  expect_error<c10::ValueError>([&] { m(x, splits); }, {"main_grad"});
  m->main_grad = torch::ones_like(m->weight);
  const torch::Tensor dy = torch::randn({7, 5});
  m(x, splits).backward(dy);
  const gl::test::Reference r =
      gl::test::reference(x, m->weight.detach(), m->bias.detach(), splits, dy);
  expect_close(m->main_grad, r.dw + 1, 1e-5, "main_grad");
  EXPECT_FALSE(m->weight.grad().defined());
}

TEST_F(CppApi, DelayWgradComputeStashesUntilBackwardDw) {
  gl::GroupedLinear m = make_experts(3, 6, 5);
  gl::GroupedLinear delayed(
      gl::GroupedLinearOptions(3, 6, 5).delay_wgrad_compute(true).device(torch::kCPU));
  delayed->load_expert_state_dict(m->expert_state_dict());
  const std::vector<int64_t> splits{4, 0, 3};
  const torch::Tensor x = torch::randn({7, 6}).requires_grad_();
  const torch::Tensor dy = torch::randn({7, 5});
  EXPECT_FALSE(m->backward_dw());  // not delayed: nothing ever waits
  delayed(x, splits).backward(dy);
  const gl::test::Reference r =
      gl::test::reference(x.detach(), m->weight.detach(), m->bias.detach(), splits, dy);
  expect_close(x.grad(), r.dx, 1e-5, "dx");
  EXPECT_FALSE(delayed->weight.grad().defined());
  EXPECT_FALSE(delayed->bias.grad().defined());
  EXPECT_TRUE(delayed->backward_dw());
  expect_close(delayed->weight.grad(), r.dw, 1e-5, "dw");
  expect_close(delayed->bias.grad(), r.db, 1e-5, "db");
  EXPECT_FALSE(delayed->backward_dw());  // the queue is empty again
}

TEST_F(CppApi, InitializationAndOptions) {
  gl::GroupedLinear m(gl::GroupedLinearOptions(4, 128, 64).device(torch::kCPU));
  EXPECT_EQ(m->weight.sizes(), (std::vector<int64_t>{4, 64, 128}));
  EXPECT_EQ(m->bias.sizes(), (std::vector<int64_t>{4, 64}));
  EXPECT_EQ(m->weight.scalar_type(), torch::kFloat);
  EXPECT_NEAR(m->weight.std().item<double>(), 0.023, 0.001);  // TE's default, as in Python
  EXPECT_NEAR(m->weight.mean().item<double>(), 0.0, 0.001);
  EXPECT_EQ(m->bias.abs().max().item<float>(), 0.f);
  EXPECT_EQ(m->parameters().size(), 2u);

  gl::GroupedLinear bf16(gl::GroupedLinearOptions(2, 8, 4)
                             .bias(false)
                             .params_dtype(torch::kBFloat16)
                             .device(torch::kCPU));
  EXPECT_EQ(bf16->weight.scalar_type(), torch::kBFloat16);
  EXPECT_FALSE(bf16->bias.defined());
  EXPECT_EQ(bf16->parameters().size(), 1u);

  std::vector<std::vector<int64_t>> seen;
  gl::GroupedLinear custom(
      gl::GroupedLinearOptions(3, 5, 2).device(torch::kCPU).init_method([&](torch::Tensor w) {
        seen.push_back(w.sizes().vec());
        w.fill_(static_cast<double>(seen.size()));
      }));
  ASSERT_EQ(seen.size(), 3u);  // once per expert
  EXPECT_EQ(seen[0], (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(custom->weight[2].min().item<float>(), 3.f);

  // meta: shapes only, no initialization (then to_empty-style use).
  gl::GroupedLinear meta(gl::GroupedLinearOptions(2, 3, 4).device(torch::kMeta));
  EXPECT_TRUE(meta->weight.is_meta());

  // Cloneable: a deep copy that computes the same.
  auto copy = std::dynamic_pointer_cast<gl::GroupedLinearImpl>(m->clone());
  ASSERT_TRUE(copy);
  EXPECT_NE(copy->weight.data_ptr(), m->weight.data_ptr());
  const torch::Tensor x = torch::randn({5, 128});
  EXPECT_TRUE(torch::equal(copy->forward(x, {2, 0, 3, 0}), m->forward(x, {2, 0, 3, 0})));

  std::ostringstream printed;
  printed << *m;
  EXPECT_EQ(printed.str(),
            "grouped_linear::GroupedLinear(num_gemms=4, in_features=128, out_features=64, "
            "bias=true)");
}

TEST_F(CppApi, BadConstructorArgumentsNameTheArgument) {
  expect_error<c10::ValueError>([] { gl::GroupedLinear(0, 4, 4); }, {"num_gemms", "is 0"});
  expect_error<c10::ValueError>([] { gl::GroupedLinear(2, -1, 4); }, {"in_features", "is -1"});
  expect_error<c10::ValueError>([] { gl::Linear(4, 0); }, {"out_features"});
  expect_error<c10::TypeError>(
      [] { gl::GroupedLinear(gl::GroupedLinearOptions(2, 4, 4).params_dtype(torch::kInt)); },
      {"params_dtype", "Int"});
}

TEST_F(CppApi, BadForwardInputNamesTheArgumentAndModuleKeepsWorking) {
  gl::GroupedLinear m = make_experts(3, 4, 5);
  const torch::Tensor x = torch::randn({6, 4});
  using V = std::vector<int64_t>;
  // The message alone (what() adds libtorch's "Exception raised from" line).
  try {
    m(x, V{2, 4});
    ADD_FAILURE() << "no exception for 2 entries";
  } catch (const c10::ValueError& e) {
    EXPECT_EQ(std::string(e.what_without_backtrace()),
              "grouped_linear: m_splits: has 2 entries; expected num_gemms = 3");
  }
  expect_error<c10::ValueError>([&] { m(x, V{2, 2, 1}); }, {"m_splits"});
  expect_error<c10::ValueError>([&] { m(x, V{2, -1, 5}); }, {"m_splits"});
  expect_error<c10::ValueError>([&] { m(torch::randn({6, 3}), V{2, 2, 2}); },
                                {"inp", "in_features"});
  expect_error<c10::ValueError>([&] { m(torch::Tensor(), V{2, 2, 2}); }, {"inp", "defined"});
  expect_error<c10::ValueError>([&] { m(torch::randn({}), V{0, 0, 0}); }, {"inp", "0-D"});
  expect_error<c10::TypeError>([&] { m(x.to(torch::kDouble), V{2, 2, 2}); }, {"inp"});
  expect_error<c10::TypeError>([&] { m(x, torch::tensor({2.0, 2.0, 2.0})); },
                               {"m_splits", "integer"});
  expect_error<c10::ValueError>([&] { m(x, torch::ones({3, 1}, torch::kLong)); },
                                {"m_splits", "1-D"});
  expect_error<c10::ValueError>([&] { m(x, torch::Tensor()); }, {"m_splits", "defined"});
  // Still works, and still matches the reference.
  check_against_reference(m, {1, 0, 5}, 1e-5);
}

TEST_F(CppApi, NamedParametersFusedCheckpointKeysPerExpert) {
  gl::GroupedLinear m = make_experts(3, 4, 2);
  const auto named = m->named_parameters();
  EXPECT_EQ(named.keys(), (std::vector<std::string>{"weight", "bias"}));
  const auto state = m->expert_state_dict();
  EXPECT_EQ(state.keys(),
            (std::vector<std::string>{"weight0", "weight1", "weight2", "bias0", "bias1", "bias2"}));
  EXPECT_TRUE(torch::equal(state["weight1"], m->weight[1]));
  EXPECT_TRUE(torch::equal(state["bias2"], m->bias[2]));
}

TEST_F(CppApi, SaveLoadRoundTripWithPerExpertKeys) {
  gl::GroupedLinear saved = make_experts(3, 4, 2);
  std::stringstream buffer;
  torch::save(saved, buffer);

  // The archive holds the per-expert names.
  torch::serialize::InputArchive archive;
  buffer.seekg(0);
  archive.load_from(buffer);
  std::vector<std::string> keys = archive.keys();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"_extra_state", "bias0", "bias1", "bias2", "weight0",
                                            "weight1", "weight2"}));

  gl::GroupedLinear loaded = make_experts(3, 4, 2);
  buffer.seekg(0);
  torch::load(loaded, buffer);
  EXPECT_TRUE(torch::equal(loaded->weight, saved->weight));
  EXPECT_TRUE(torch::equal(loaded->bias, saved->bias));
  EXPECT_TRUE(loaded->weight.requires_grad());

  // Inside a parent module, under the child's name.
  struct Block : torch::nn::Module {
    gl::GroupedLinear experts{nullptr};
    Block() { experts = register_module("experts", make_experts(3, 4, 2)); }
  };
  auto parent = std::make_shared<Block>();
  auto parent_loaded = std::make_shared<Block>();
  std::stringstream parent_buffer;
  torch::save(parent, parent_buffer);
  torch::load(parent_loaded, parent_buffer);
  EXPECT_TRUE(torch::equal(parent_loaded->experts->weight, parent->experts->weight));
}

TEST_F(CppApi, LoadAcceptsFusedKeysAndRejectsBadStatesUnchanged) {
  gl::GroupedLinear m = make_experts(2, 3, 2);
  const torch::Tensor before = m->weight.detach().clone();
  using Dict = torch::OrderedDict<std::string, torch::Tensor>;

  Dict fused;
  fused.insert("weight", torch::ones({2, 2, 3}, torch::kDouble));  // converted to float32
  fused.insert("bias", torch::zeros({2, 2}));
  m->load_expert_state_dict(fused);
  EXPECT_EQ(m->weight.min().item<float>(), 1.f);
  EXPECT_EQ(m->weight.scalar_type(), torch::kFloat);

  Dict state = m->expert_state_dict();
  Dict missing;
  for (const auto& item : state)
    if (item.key() != "weight1") missing.insert(item.key(), item.value().clone());
  {
    torch::NoGradGuard no_grad;
    m->weight.copy_(before);
  }
  expect_error<c10::ValueError>([&] { m->load_expert_state_dict(missing); },
                                {"missing key 'weight1'"});
  Dict bad_shape;
  for (const auto& item : state) bad_shape.insert(item.key(), torch::zeros({5}));
  expect_error<c10::ValueError>([&] { m->load_expert_state_dict(bad_shape); },
                                {"'weight0'", "shape [5]", "expected [2, 3]"});
  Dict mixed = m->expert_state_dict();
  mixed.insert("weight", torch::zeros({2, 2, 3}));
  expect_error<c10::ValueError>([&] { m->load_expert_state_dict(mixed); },
                                {"'weight'", "'weight0'"});
  Dict extra = m->expert_state_dict();
  extra.insert("weight2", torch::zeros({2, 3}));
  expect_error<c10::ValueError>([&] { m->load_expert_state_dict(extra); },
                                {"unexpected key 'weight2'"});
  EXPECT_TRUE(torch::equal(m->weight, before));  // every rejection left it unchanged
}

}  // namespace
