// Bad problems fail before anything is written: each throws
// grouped_linear::Error of the right kind with a message naming the argument,
// and leaves the outputs as they were. Also the engine registry.
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "core/builtin_engines.h"
#include "core/cpu/cpu_engine.h"
#include "core/engine_registry.h"
#include "core/error.h"
#include "test_util.h"

namespace gl_test {
namespace {

using grouped_linear::Device;
using grouped_linear::DeviceType;
using grouped_linear::Error;
using grouped_linear::ErrorKind;
using grouped_linear::ExecContext;
using grouped_linear::GroupedGemmEngine;

const char* kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kValue: return "kValue";
    case ErrorKind::kType: return "kType";
    case ErrorKind::kRuntime: return "kRuntime";
  }
  return "?";
}

// `fn` throws grouped_linear::Error of `kind` whose message holds every one
// of `words`.
template <typename Fn>
void expect_error(Fn&& fn, ErrorKind kind, std::initializer_list<const char*> words) {
  try {
    fn();
    ADD_FAILURE() << "expected a grouped_linear::Error (" << kind_name(kind)
                  << "), but nothing was thrown";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(kind_name(e.kind()), std::string(kind_name(kind))) << "message: " << message;
    EXPECT_EQ(message.rfind("grouped_linear: ", 0), 0u) << "message: " << message;
    for (const char* word : words)
      EXPECT_NE(message.find(word), std::string::npos)
          << "message '" << message << "' does not name '" << word << "'";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a grouped_linear::Error, got another exception: " << e.what();
  }
}

constexpr Device kCuda0{DeviceType::kCUDA, 0};
constexpr Device kCuda1{DeviceType::kCUDA, 1};

// A valid problem of each role, small, fp16, three groups of rows {2, 0, 3}.
const Case kSmall{
    {DType::kFloat16, DType::kFloat16}, {"small", 5, 4, 6, 3, 0}, Split::kRandomWithEmpty};

GroupedGemmEngine& cpu_engine() { return grouped_linear::cpu::reference_engine(); }

// Every byte of `t` still holds the poison it started with.
void expect_all_poison(const HostTensor& t, const char* what) {
  int64_t written = 0;
  for (int64_t i = 0; i < t.storage_elements(); ++i) written += t.is_poison(i) ? 0 : 1;
  EXPECT_EQ(written, 0) << what << " was written by a call that threw";
}

void expect_same_bits(const HostTensor& t, const HostTensor& before, const char* what) {
  int64_t changed = 0;
  for (int64_t i = 0; i < t.storage_elements(); ++i)
    changed += t.bits_at(i) == before.bits_at(i) ? 0 : 1;
  EXPECT_EQ(changed, 0) << what << " was changed by a call that threw";
}

class ValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = seed_for(current_test_name());
    std::mt19937 rng(seed_);
    fwd_ = make_forward(kSmall, /*with_bias=*/true, rng);
    dgrad_ = make_dgrad(kSmall, rng);
    wgrad_ = make_wgrad(kSmall, WgradMode::kAccumulateDbias, rng);
    fwd_.sizes = dgrad_.sizes = wgrad_.sizes = {2, 0, 3};
  }

  // `p` (the valid problem, broken by the caller) fails validation and the
  // CPU engine, with the same error, and Y is untouched.
  void expect_forward_error(const ForwardProblem& p, ErrorKind kind,
                            std::initializer_list<const char*> words) {
    SCOPED_TRACE(seed_message(seed_));
    expect_error([&] { grouped_linear::validate(p); }, kind, words);
    expect_error([&] { cpu_engine().forward(p, ExecContext{}); }, kind, words);
    expect_all_poison(fwd_.y, "Y");
  }
  void expect_dgrad_error(const DgradProblem& p, ErrorKind kind,
                          std::initializer_list<const char*> words) {
    SCOPED_TRACE(seed_message(seed_));
    expect_error([&] { grouped_linear::validate(p); }, kind, words);
    expect_error([&] { cpu_engine().dgrad(p, ExecContext{}); }, kind, words);
    expect_all_poison(dgrad_.dx, "dX");
  }
  void expect_wgrad_error(const WgradProblem& p, ErrorKind kind,
                          std::initializer_list<const char*> words) {
    SCOPED_TRACE(seed_message(seed_));
    expect_error([&] { grouped_linear::validate(p); }, kind, words);
    expect_error([&] { cpu_engine().wgrad(p, ExecContext{}); }, kind, words);
    expect_same_bits(wgrad_.dw, wgrad_.dw_before, "main_grad");
    expect_all_poison(wgrad_.db, "db");
  }

  uint32_t seed_ = 0;
  ForwardData fwd_;
  DgradData dgrad_;
  WgradData wgrad_;
};

TEST_F(ValidationTest, ValidProblemsPass) {
  EXPECT_NO_THROW(grouped_linear::validate(fwd_.problem()));
  EXPECT_NO_THROW(grouped_linear::validate(dgrad_.problem()));
  EXPECT_NO_THROW(grouped_linear::validate(wgrad_.problem()));
  // float32 outputs of float16 inputs are allowed too.
  HostTensor y32 = HostTensor::matrix(DType::kFloat32, 5, 6);
  ForwardProblem p = fwd_.problem();
  p.y = y32.matrix_view();
  EXPECT_NO_THROW(grouped_linear::validate(p));
}

// --- group sizes -----------------------------------------------------------

TEST_F(ValidationTest, NegativeSplit) {
  // Group 0 is valid and comes first: an engine that checked lazily would
  // have written its rows before finding the bad entry.
  fwd_.sizes = {6, -1, 0};
  expect_forward_error(fwd_.problem(), ErrorKind::kValue, {"m_splits", "entry 1", "-1"});
  dgrad_.sizes = {6, -1, 0};
  expect_dgrad_error(dgrad_.problem(), ErrorKind::kValue, {"m_splits", "entry 1", "-1"});
  wgrad_.sizes = {6, -1, 0};
  expect_wgrad_error(wgrad_.problem(), ErrorKind::kValue, {"m_splits", "entry 1", "-1"});
}

TEST_F(ValidationTest, SplitsNotSummingToRows) {
  fwd_.sizes = {5, 0, 1};  // 6 rows for T = 5
  expect_forward_error(fwd_.problem(), ErrorKind::kValue, {"m_splits", "sums to 6", "5"});
  fwd_.sizes = {2, 0, 2};  // 4 rows for T = 5
  expect_forward_error(fwd_.problem(), ErrorKind::kValue, {"m_splits", "sums to 4"});
  dgrad_.sizes = {5, 0, 1};
  expect_dgrad_error(dgrad_.problem(), ErrorKind::kValue, {"m_splits", "sums to 6"});
  wgrad_.sizes = {5, 0, 1};
  expect_wgrad_error(wgrad_.problem(), ErrorKind::kValue, {"m_splits", "sums to 6"});
}

TEST_F(ValidationTest, WrongNumberOfSplits) {
  fwd_.sizes = {2, 3};
  expect_forward_error(fwd_.problem(), ErrorKind::kValue, {"m_splits", "2 entries", "(3)"});
  fwd_.sizes = {2, 0, 3, 0};
  expect_forward_error(fwd_.problem(), ErrorKind::kValue, {"m_splits", "4 entries", "(3)"});
  dgrad_.sizes = {5};
  expect_dgrad_error(dgrad_.problem(), ErrorKind::kValue, {"m_splits", "1 entries"});
  wgrad_.sizes = {5};
  expect_wgrad_error(wgrad_.problem(), ErrorKind::kValue, {"m_splits", "1 entries"});
}

TEST_F(ValidationTest, MissingSplits) {
  ForwardProblem p = fwd_.problem();
  p.splits.host = nullptr;
  expect_forward_error(p, ErrorKind::kValue, {"m_splits", "no group sizes"});
}

TEST_F(ValidationTest, DeviceSplitsOfUnsupportedDtype) {
  const int64_t fake_device_sizes[3] = {2, 0, 3};  // never read: the dtype fails first
  ForwardProblem p = fwd_.problem();
  p.splits.device = fake_device_sizes;
  p.splits.device_dtype = DType::kFloat32;
  expect_forward_error(p, ErrorKind::kType, {"m_splits", "float32", "int32 or int64"});
}

TEST_F(ValidationTest, CpuEngineNeedsHostSplits) {
  const int64_t sizes[3] = {2, 0, 3};
  ForwardProblem p = fwd_.problem();
  p.splits.host = nullptr;
  p.splits.device = sizes;  // "device" sizes are enough for validate, not for the CPU engine
  EXPECT_NO_THROW(grouped_linear::validate(p));
  expect_error([&] { cpu_engine().forward(p, ExecContext{}); }, ErrorKind::kValue,
               {"m_splits", "host memory"});
  expect_all_poison(fwd_.y, "Y");
}

TEST_F(ValidationTest, ValidateGroupSizes) {
  const int64_t good[3] = {1, 0, 2};
  EXPECT_NO_THROW(grouped_linear::validate_group_sizes(good, 3, 3));
  EXPECT_NO_THROW(grouped_linear::validate_group_sizes(good, 0, 0));
  const int64_t negative[3] = {4, -1, 0};
  expect_error([&] { grouped_linear::validate_group_sizes(negative, 3, 3); }, ErrorKind::kValue,
               {"m_splits", "entry 1"});
  expect_error([&] { grouped_linear::validate_group_sizes(good, 3, 4); }, ErrorKind::kValue,
               {"m_splits", "sums to 3", "(4)"});
}

// --- shapes ----------------------------------------------------------------

TEST_F(ValidationTest, ForwardInFeaturesMismatch) {
  HostTensor x = HostTensor::matrix(DType::kFloat16, 5, 7);  // K = 7, weight has K = 4
  ForwardProblem p = fwd_.problem();
  p.x = x.matrix_view();
  expect_forward_error(p, ErrorKind::kValue, {"inp", "7", "in_features = 4"});
}

TEST_F(ValidationTest, ForwardBadShapes) {
  ForwardProblem p = fwd_.problem();
  p.y.cols = 5;
  expect_forward_error(p, ErrorKind::kValue, {"out", "shape"});
  p = fwd_.problem();
  p.y.rows = 4;
  expect_forward_error(p, ErrorKind::kValue, {"out", "shape"});
  p = fwd_.problem();
  p.bias.cols = 5;
  expect_forward_error(p, ErrorKind::kValue, {"bias", "shape"});
  p = fwd_.problem();
  p.bias.groups = 2;
  expect_forward_error(p, ErrorKind::kValue, {"bias", "shape"});
  p = fwd_.problem();
  p.x.row_stride = 3;  // fewer than its 4 columns
  expect_forward_error(p, ErrorKind::kValue, {"inp", "row stride 3"});
  p = fwd_.problem();
  p.w.group_stride = 10;  // overlaps the 6 x 4 matrices
  expect_forward_error(p, ErrorKind::kValue, {"weight", "strides"});
}

TEST_F(ValidationTest, DgradOutFeaturesMismatch) {
  HostTensor dy = HostTensor::matrix(DType::kFloat16, 5, 9);  // N = 9, weight has N = 6
  DgradProblem p = dgrad_.problem();
  p.dy = dy.matrix_view();
  expect_dgrad_error(p, ErrorKind::kValue, {"grad_output", "9", "out_features = 6"});
  p = dgrad_.problem();
  p.dx.cols = 3;
  expect_dgrad_error(p, ErrorKind::kValue, {"grad_input", "shape"});
}

TEST_F(ValidationTest, WgradShapes) {
  WgradProblem p = wgrad_.problem();
  p.dw.cols = 3;  // K mismatch with X
  expect_wgrad_error(p, ErrorKind::kValue, {"main_grad", "shape"});
  p.accumulate = false;
  expect_wgrad_error(p, ErrorKind::kValue, {"grad_weight", "shape"});
  p = wgrad_.problem();
  p.dbias.groups = 4;
  expect_wgrad_error(p, ErrorKind::kValue, {"grad_bias", "shape"});
  p = wgrad_.problem();
  HostTensor x = HostTensor::matrix(DType::kFloat16, 4, 4);  // 4 rows, dY has 5
  p.x = x.matrix_view();
  expect_wgrad_error(p, ErrorKind::kValue, {"grad_output", "shape"});
  p = wgrad_.problem();
  p.dw.present = false;
  p.dbias.present = false;
  expect_wgrad_error(p, ErrorKind::kValue, {"wgrad", "neither"});
}

// --- dtypes ----------------------------------------------------------------

TEST_F(ValidationTest, UnsupportedOperandDtype) {
  ForwardProblem p = fwd_.problem();
  p.x.dtype = p.w.dtype = p.bias.dtype = DType::kInt32;
  expect_forward_error(p, ErrorKind::kType, {"inp", "int32", "not supported"});
  p.x.dtype = p.w.dtype = p.bias.dtype = DType::kFloat8E4M3;
  expect_forward_error(p, ErrorKind::kType, {"inp", "float8_e4m3"});
  DgradProblem d = dgrad_.problem();
  d.dy.dtype = d.w.dtype = DType::kInt64;
  expect_dgrad_error(d, ErrorKind::kType, {"grad_output", "int64"});
  WgradProblem w = wgrad_.problem();
  w.dy.dtype = w.x.dtype = DType::kInt32;
  expect_wgrad_error(w, ErrorKind::kType, {"grad_output", "int32"});
}

TEST_F(ValidationTest, MixedDtypes) {
  ForwardProblem p = fwd_.problem();
  p.w.dtype = DType::kBFloat16;
  expect_forward_error(p, ErrorKind::kType, {"mixed dtypes", "inp", "weight", "bfloat16"});
  p = fwd_.problem();
  p.bias.dtype = DType::kFloat32;
  expect_forward_error(p, ErrorKind::kType, {"mixed dtypes", "bias"});
  DgradProblem d = dgrad_.problem();
  d.w.dtype = DType::kFloat32;
  expect_dgrad_error(d, ErrorKind::kType, {"mixed dtypes", "grad_output", "weight"});
  WgradProblem w = wgrad_.problem();
  w.x.dtype = DType::kBFloat16;
  expect_wgrad_error(w, ErrorKind::kType, {"mixed dtypes", "grad_output", "inp"});
}

TEST_F(ValidationTest, OutputDtype) {
  ForwardProblem p = fwd_.problem();
  p.y.dtype = DType::kBFloat16;  // float16 inputs: float16 or float32 out
  expect_forward_error(p, ErrorKind::kType, {"out", "bfloat16", "float16 or float32"});
  DgradProblem d = dgrad_.problem();
  d.dx.dtype = DType::kInt32;
  expect_dgrad_error(d, ErrorKind::kType, {"grad_input", "int32"});
  WgradProblem w = wgrad_.problem();
  w.dw.dtype = DType::kBFloat16;
  expect_wgrad_error(w, ErrorKind::kType, {"main_grad", "bfloat16"});
  w = wgrad_.problem();
  w.dbias.dtype = DType::kBFloat16;
  expect_wgrad_error(w, ErrorKind::kType, {"grad_bias", "bfloat16"});
}

// --- devices ---------------------------------------------------------------

TEST_F(ValidationTest, DeviceMismatch) {
  ForwardProblem p = fwd_.problem();
  p.w.device = kCuda0;
  expect_forward_error(p, ErrorKind::kValue, {"inp", "weight", "cpu", "cuda:0", "same device"});
  p = fwd_.problem();
  p.y.device = kCuda0;
  expect_forward_error(p, ErrorKind::kValue, {"out", "cuda:0"});
  p = fwd_.problem();
  p.bias.device = kCuda0;
  expect_forward_error(p, ErrorKind::kValue, {"bias", "cuda:0"});
  // Two GPUs are two devices.
  p = fwd_.problem();
  p.x.device = p.y.device = p.bias.device = kCuda0;
  p.w.device = kCuda1;
  expect_error([&] { grouped_linear::validate(p); }, ErrorKind::kValue,
               {"inp", "cuda:0", "weight", "cuda:1"});
  DgradProblem d = dgrad_.problem();
  d.dx.device = kCuda0;
  expect_dgrad_error(d, ErrorKind::kValue, {"grad_input", "cuda:0"});
  WgradProblem w = wgrad_.problem();
  w.dw.device = kCuda0;
  expect_wgrad_error(w, ErrorKind::kValue, {"main_grad", "cuda:0"});
  w = wgrad_.problem();
  w.x.device = kCuda0;
  expect_wgrad_error(w, ErrorKind::kValue, {"grad_output", "inp", "cuda:0"});
}

// --- errors ----------------------------------------------------------------

TEST(ErrorFacility, KindsAndMessages) {
  expect_error([] { GL_CHECK_VALUE(1 + 1 == 3, "arg: is ", 2, "; expected ", 3); },
               ErrorKind::kValue, {"arg: is 2; expected 3"});
  expect_error([] { GL_CHECK_TYPE(false, "t"); }, ErrorKind::kType, {"t"});
  // Internal checks carry their location.
  expect_error([] { GL_CHECK(false, "internal"); }, ErrorKind::kRuntime,
               {"internal", "test_validation.cpp:"});
  EXPECT_NO_THROW(GL_CHECK_VALUE(true, "never"));
}

// --- engine registry -------------------------------------------------------

class FakeEngine final : public GroupedGemmEngine {
 public:
  const char* name() const override { return "test_fake"; }
  void forward(const ForwardProblem&, const ExecContext&) override {}
  void dgrad(const DgradProblem&, const ExecContext&) override {}
  void wgrad(const WgradProblem&, const ExecContext&) override {}
};

FakeEngine& fake_engine() {
  static FakeEngine engine;
  return engine;
}

// Clears the CPU override however the test ends, so no other test sees it.
struct OverrideReset {
  ~OverrideReset() { grouped_linear::set_engine_override(DeviceType::kCPU, ""); }
};

const Device kCpu{};

TEST(EngineRegistry, CpuDefaultIsTheReference) {
  grouped_linear::register_cpu_engines();
  grouped_linear::register_cpu_engines();  // idempotent
  EXPECT_STREQ(grouped_linear::engine_for(kCpu).name(), "cpu_reference");
  EXPECT_EQ(&grouped_linear::engine_for(kCpu), &cpu_engine());
  const std::vector<std::string> names = grouped_linear::engine_names(DeviceType::kCPU);
  EXPECT_EQ(std::count(names.begin(), names.end(), "cpu_reference"), 1);
  EXPECT_STREQ(grouped_linear::engine_for(kCpu, "cpu_reference").name(), "cpu_reference");
}

TEST(EngineRegistry, UnknownNameThrowsAndNamesTheChoices) {
  grouped_linear::register_cpu_engines();
  expect_error([] { grouped_linear::engine_for(kCpu, "no_such_engine"); }, ErrorKind::kValue,
               {"no_such_engine", "cpu", "expected one of", "cpu_reference"});
  expect_error([] { grouped_linear::set_engine_override(DeviceType::kCPU, "no_such_engine"); },
               ErrorKind::kValue, {"no_such_engine", "expected one of", "cpu_reference"});
}

TEST(EngineRegistry, OverrideSelectsAndClears) {
  OverrideReset reset;
  grouped_linear::register_cpu_engines();  // first registered: stays the default
  grouped_linear::register_engine(DeviceType::kCPU, &fake_engine());
  EXPECT_STREQ(grouped_linear::engine_for(kCpu).name(), "cpu_reference");

  grouped_linear::set_engine_override(DeviceType::kCPU, "test_fake");
  EXPECT_EQ(&grouped_linear::engine_for(kCpu), &fake_engine());
  // A name asked for explicitly wins over the override.
  EXPECT_STREQ(grouped_linear::engine_for(kCpu, "cpu_reference").name(), "cpu_reference");
  // A bad override is refused and leaves the current one in place.
  expect_error([] { grouped_linear::set_engine_override(DeviceType::kCPU, "nope"); },
               ErrorKind::kValue, {"nope", "cpu_reference", "test_fake"});
  EXPECT_EQ(&grouped_linear::engine_for(kCpu), &fake_engine());

  grouped_linear::set_engine_override(DeviceType::kCPU, "");
  EXPECT_STREQ(grouped_linear::engine_for(kCpu).name(), "cpu_reference");
  EXPECT_EQ(&grouped_linear::engine_for(kCpu), &cpu_engine());
}

TEST(EngineRegistry, NoCudaEngineInACpuOnlyBinary) {
  // This binary links gl_core alone: nothing is registered for CUDA.
  ASSERT_TRUE(grouped_linear::engine_names(DeviceType::kCUDA).empty());
  expect_error([] { grouped_linear::engine_for(kCuda0); }, ErrorKind::kValue,
               {"no grouped GEMM engine", "cuda"});
  expect_error([] { grouped_linear::engine_for(kCuda0, "cublas"); }, ErrorKind::kValue,
               {"cublas", "cuda", "none"});
  expect_error([] { grouped_linear::set_engine_override(DeviceType::kCUDA, "cublas"); },
               ErrorKind::kValue, {"cublas", "none"});
}

}  // namespace
}  // namespace gl_test
