// The FP8 products (core/fp8/fp8_gemm.h) on the CPU: the emulation against a
// float64 reference on the same dequantized values (so the tolerances are
// those of the unquantized engines: float32 1e-5, bfloat16 1e-2), the choice
// between an engine's FP8 kernels and the emulation, and the checks.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/cpu/cpu_engine.h"
#include "core/error.h"
#include "core/fp8/fp8_gemm.h"
#include "core/fp8/quantize_ops.h"
#include "test_util.h"

namespace gl_test {
namespace {

namespace fp8 = grouped_linear::fp8;
using grouped_linear::Device;
using grouped_linear::Error;
using grouped_linear::ErrorKind;
using grouped_linear::ExecContext;
using grouped_linear::GroupedGemmEngine;

const ExecContext kCpu{Device{grouped_linear::DeviceType::kCPU, -1}, nullptr, nullptr};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

fp8::ScaleView scales(std::vector<float>& s, bool block, int block_rows) {
  fp8::ScaleView v;
  v.scale_inv = s.empty() ? nullptr : s.data();
  if (block) {
    v.layout = fp8::ScaleLayout::kBlock;
    v.block_rows = block_rows;
    v.block_cols = 128;
  }
  return v;
}

MatrixView codes_matrix(std::vector<uint8_t>& codes, fp8::Format format, int64_t rows,
                        int64_t cols) {
  codes.assign(static_cast<size_t>(rows * cols), 0xAA);
  MatrixView m;
  m.data = codes.empty() ? nullptr : codes.data();
  m.dtype = fp8::code_dtype(format);
  m.rows = rows;
  m.cols = cols;
  m.row_stride = cols;
  return m;
}

// An activation [T, C] cast into both copies (current scaling or 1 x 128 blocks).
struct Activation {
  std::vector<uint8_t> row, col;
  std::vector<float> row_s, col_s;
  fp8::QuantizedActivation q;
};

void quantize(HostTensor& x, const std::vector<int64_t>& sizes, fp8::RecipeKind kind,
              fp8::Format format, Activation& a) {
  const int64_t t = x.rows(), c = x.cols(), groups = static_cast<int64_t>(sizes.size());
  const bool block = kind == fp8::RecipeKind::kBlock;
  a.row_s.assign(block ? static_cast<size_t>(t * ceil_div(c, 128)) : 1, 0.f);
  a.col_s.assign(block ? static_cast<size_t>(c * fp8::column_block_capacity(t, groups)) : 1, 0.f);
  a.q.format = format;
  a.q.rowwise = codes_matrix(a.row, format, t, c);
  a.q.columnwise = codes_matrix(a.col, format, c, fp8::padded_columns(t, groups));
  a.q.rowwise_scale = scales(a.row_s, block, 1);
  a.q.columnwise_scale = scales(a.col_s, block, 1);
  fp8::ActivationQuantize r;
  r.input = x.matrix_view();
  r.splits = host_splits(sizes);
  r.kind = kind;
  r.format = format;
  r.power_2_scales = block;
  r.out = a.q;
  fp8::quantize_activation(r, kCpu);
}

struct Weight {
  std::vector<uint8_t> row, col;
  std::vector<float> row_s, col_s;
  fp8::QuantizedWeight q;
};

GroupedMatrixView codes_grouped(std::vector<uint8_t>& codes, fp8::Format format, int64_t groups,
                                int64_t rows, int64_t cols) {
  codes.assign(static_cast<size_t>(groups * rows * cols), 0xAA);
  GroupedMatrixView m;
  m.data = codes.data();
  m.dtype = fp8::code_dtype(format);
  m.groups = groups;
  m.rows = rows;
  m.cols = cols;
  m.row_stride = cols;
  m.group_stride = rows * cols;
  m.present = true;
  return m;
}

void quantize(HostTensor& w, fp8::RecipeKind kind, fp8::Format format, Weight& out) {
  const int64_t groups = w.groups(), n = w.rows(), k = w.cols();
  const bool block = kind == fp8::RecipeKind::kBlock;
  const size_t count = block ? static_cast<size_t>(groups * ceil_div(n, 128) * ceil_div(k, 128))
                             : static_cast<size_t>(groups);
  out.row_s.assign(count, 0.f);
  out.col_s.assign(count, 0.f);
  out.q.format = format;
  out.q.rowwise = codes_grouped(out.row, format, groups, n, k);
  out.q.columnwise = codes_grouped(out.col, format, groups, k, n);
  out.q.rowwise_scale = scales(out.row_s, block, 128);
  out.q.columnwise_scale = scales(out.col_s, block, 128);
  fp8::WeightQuantize r;
  r.input = w.grouped_view();
  r.kind = kind;
  r.format = format;
  r.power_2_scales = block;
  r.out = out.q;
  fp8::quantize_weight(r, kCpu);
}

HostTensor dequantized(const Activation& a, bool columnwise, const std::vector<int64_t>& sizes,
                       int64_t t, int64_t c) {
  HostTensor out = HostTensor::matrix(DType::kFloat32, t, c);
  fp8::dequantize_activation(a.q, columnwise, host_splits(sizes), out.matrix_view(), kCpu);
  return out;
}

HostTensor dequantized(const Weight& w, bool columnwise, int64_t groups, int64_t n, int64_t k) {
  HostTensor out(DType::kFloat32, groups, n, k);
  fp8::dequantize_weight(w.q, columnwise, out.grouped_view(), kCpu);
  return out;
}

struct Param {
  fp8::RecipeKind kind;
  DType out_dtype;
};

class Fp8GemmEmulation : public ::testing::TestWithParam<Param> {};

TEST_P(Fp8GemmEmulation, MatchesTheReferenceOnDequantizedValues) {
  const Param p = GetParam();
  const uint32_t seed = seed_for(current_test_name());
  SCOPED_TRACE(seed_message(seed));
  std::mt19937 rng(seed);
  // K and N below and above one 128-block, a group spanning two row blocks, an empty group.
  const int64_t groups = 3, t = 170, k = 37, n = 140;
  const std::vector<int64_t> sizes = {130, 0, 40};
  HostTensor x = HostTensor::matrix(DType::kFloat32, t, k),
             dy = HostTensor::matrix(DType::kFloat32, t, n);
  HostTensor w(DType::kFloat32, groups, n, k), bias(p.out_dtype, groups, 1, n);
  x.fill_random(rng);
  dy.fill_random(rng);
  w.fill_random(rng);
  bias.fill_random(rng);
  const fp8::Format fwd = fp8::Format::kE4M3;
  const fp8::Format bwd =
      p.kind == fp8::RecipeKind::kBlock ? fp8::Format::kE4M3 : fp8::Format::kE5M2;
  Activation xq, dyq;
  Weight wq;
  quantize(x, sizes, p.kind, fwd, xq);
  quantize(dy, sizes, p.kind, bwd, dyq);
  quantize(w, p.kind, fwd, wq);
  const HostTensor x_row = dequantized(xq, false, sizes, t, k);
  const HostTensor x_col = dequantized(xq, true, sizes, t, k);
  const HostTensor dy_row = dequantized(dyq, false, sizes, t, n);
  const HostTensor dy_col = dequantized(dyq, true, sizes, t, n);
  const HostTensor w_row = dequantized(wq, false, groups, n, k);
  const HostTensor w_col = dequantized(wq, true, groups, n, k);
  EXPECT_EQ(w_row.packed(), w_col.packed()) << "the column-wise weight is the exact transpose";
  GroupedGemmEngine& engine = grouped_linear::cpu::reference_engine();

  HostTensor y = HostTensor::matrix(p.out_dtype, t, n);
  fp8::ForwardProblem fwd_problem;
  fwd_problem.x = xq.q;
  fwd_problem.w = wq.q;
  fwd_problem.bias = bias.grouped_view();
  fwd_problem.y = y.matrix_view();
  fwd_problem.splits = host_splits(sizes);
  fp8::run_fp8_forward(engine, fwd_problem, kCpu);
  expect_matches(y, reference_forward(x_row, w_row, &bias, sizes), "fp8 forward");

  HostTensor dx = HostTensor::matrix(p.out_dtype, t, k);
  fp8::DgradProblem dgrad_problem;
  dgrad_problem.dy = dyq.q;
  dgrad_problem.w = wq.q;
  dgrad_problem.dx = dx.matrix_view();
  dgrad_problem.splits = host_splits(sizes);
  fp8::run_fp8_dgrad(engine, dgrad_problem, kCpu);
  expect_matches(dx, reference_dgrad(dy_row, w_row, sizes), "fp8 dgrad");

  // wgrad, written and then accumulated into (main_grad in the output dtype).
  HostTensor dw(p.out_dtype, groups, n, k);
  fp8::WgradProblem wgrad_problem;
  wgrad_problem.dy = dyq.q;
  wgrad_problem.x = xq.q;
  wgrad_problem.dw = dw.grouped_view();
  wgrad_problem.splits = host_splits(sizes);
  wgrad_problem.total_rows = t;
  fp8::run_fp8_wgrad(engine, wgrad_problem, kCpu);
  std::vector<double> dw_ref, db_ref;
  reference_wgrad(dy_col, x_col, sizes, &dw_ref, &db_ref);
  expect_matches(dw, dw_ref, "fp8 wgrad");
  expect_group_equals(dw, 1, 0.0, "fp8 wgrad of the empty group");
  const std::vector<double> prior = dw.packed();
  wgrad_problem.accumulate = true;
  fp8::run_fp8_wgrad(engine, wgrad_problem, kCpu);
  std::vector<double> twice(prior.size());
  for (size_t i = 0; i < prior.size(); ++i) twice[i] = prior[i] + dw_ref[i];
  expect_matches(dw, twice, "fp8 wgrad accumulated");
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8GemmEmulation,
                         ::testing::Values(Param{fp8::RecipeKind::kCurrent, DType::kFloat32},
                                           Param{fp8::RecipeKind::kCurrent, DType::kBFloat16},
                                           Param{fp8::RecipeKind::kBlock, DType::kFloat32},
                                           Param{fp8::RecipeKind::kBlock, DType::kBFloat16}),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(info.param.kind == fp8::RecipeKind::kBlock
                                                  ? "block"
                                                  : "current") +
                                  "_" + short_name(info.param.out_dtype);
                         });

// An engine without FP8 kernels, or one that claims them, around the CPU reference.
class FakeEngine final : public GroupedGemmEngine {
 public:
  explicit FakeEngine(bool fp8_kernels) : fp8_kernels_(fp8_kernels) {}
  const char* name() const override { return "fake"; }
  void forward(const grouped_linear::ForwardProblem& p, const ExecContext& ctx) override {
    ++unquantized_calls;
    grouped_linear::cpu::reference_engine().forward(p, ctx);
  }
  void dgrad(const grouped_linear::DgradProblem& p, const ExecContext& ctx) override {
    ++unquantized_calls;
    grouped_linear::cpu::reference_engine().dgrad(p, ctx);
  }
  void wgrad(const grouped_linear::WgradProblem& p, const ExecContext& ctx) override {
    ++unquantized_calls;
    grouped_linear::cpu::reference_engine().wgrad(p, ctx);
  }
  bool runs_fp8(const fp8::ForwardProblem&, const ExecContext&) const override {
    return fp8_kernels_;
  }
  void fp8_forward(const fp8::ForwardProblem& p, const ExecContext& ctx) override {
    if (!fp8_kernels_) GroupedGemmEngine::fp8_forward(p, ctx);
    ++fp8_calls;
  }
  int unquantized_calls = 0, fp8_calls = 0;

 private:
  bool fp8_kernels_;
};

struct SmallForward {
  HostTensor x = HostTensor::matrix(DType::kFloat32, 6, 8);
  HostTensor w = HostTensor(DType::kFloat32, 2, 4, 8);
  HostTensor y = HostTensor::matrix(DType::kFloat32, 6, 4);
  std::vector<int64_t> sizes = {2, 4};
  Activation xq;
  Weight wq;
  fp8::ForwardProblem problem;

  SmallForward() {
    std::mt19937 rng(1);
    x.fill_random(rng);
    w.fill_random(rng);
    quantize(x, sizes, fp8::RecipeKind::kCurrent, fp8::Format::kE4M3, xq);
    quantize(w, fp8::RecipeKind::kCurrent, fp8::Format::kE4M3, wq);
    problem.x = xq.q;
    problem.w = wq.q;
    problem.y = y.matrix_view();
    problem.splits = host_splits(sizes);
  }
};

TEST(Fp8GemmDispatch, EmulatesOnEnginesWithoutFp8Kernels) {
  SmallForward f;
  FakeEngine engine(/*fp8_kernels=*/false);
  fp8::run_fp8_forward(engine, f.problem, kCpu);
  EXPECT_EQ(engine.unquantized_calls, 1);
  EXPECT_EQ(engine.fp8_calls, 0);
  try {
    engine.fp8_forward(f.problem, kCpu);
    FAIL() << "the default fp8_forward should throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
    EXPECT_NE(std::string(e.what()).find("engine 'fake' has no FP8 forward kernel"),
              std::string::npos)
        << e.what();
  }
}

TEST(Fp8GemmDispatch, UsesTheEnginesFp8Kernels) {
  SmallForward f;
  FakeEngine engine(/*fp8_kernels=*/true);
  fp8::run_fp8_forward(engine, f.problem, kCpu);
  EXPECT_EQ(engine.fp8_calls, 1);
  EXPECT_EQ(engine.unquantized_calls, 0);
}

TEST(Fp8GemmErrors, ChecksNameTheOperand) {
  SmallForward f;
  GroupedGemmEngine& engine = grouped_linear::cpu::reference_engine();
  const auto expect_error = [&](fp8::ForwardProblem p, ErrorKind kind, const std::string& text) {
    f.y.poison();
    try {
      fp8::run_fp8_forward(engine, p, kCpu);
      ADD_FAILURE() << "expected an error containing '" << text << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
    for (int64_t i = 0; i < f.y.storage_elements(); ++i)
      ASSERT_TRUE(f.y.is_poison(i)) << "out was written by a rejected problem";
  };
  fp8::ForwardProblem p = f.problem;
  p.x.rowwise.dtype = DType::kFloat8E5M2;
  expect_error(p, ErrorKind::kType, "inp (fp8 row-wise): codes have dtype float8_e5m2");
  p = f.problem;
  p.y.cols = 5;
  expect_error(p, ErrorKind::kValue, "out: shape [6, 5] does not match the expected [6, 4]");
  p = f.problem;
  p.y.dtype = DType::kInt32;
  expect_error(p, ErrorKind::kType, "out: dtype int32 is not supported");
  p = f.problem;
  p.w.rowwise_scale.scale_inv = nullptr;
  expect_error(p, ErrorKind::kValue, "weight (fp8 row-wise): scale_inv is missing");
  p = f.problem;
  std::vector<int64_t> three = {2, 2, 2};
  p.splits = host_splits(three);
  expect_error(p, ErrorKind::kValue, "m_splits: has 3 entries");
}

}  // namespace
}  // namespace gl_test
