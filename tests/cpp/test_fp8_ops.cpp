// The FP8 quantization operations on the CPU (core/fp8/quantize_ops.h):
// layouts (row-wise, group-aligned column-wise with zero padding, block
// scales), bits against the reference in quantize.h, the fused bias
// gradient, state updates, group sizes in every form, the fused delayed
// scaling update, and request validation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp8/delayed_scaling_ops.h"
#include "core/fp8/quantize.h"
#include "core/fp8/quantize_ops.h"
#include "core/fp8/scaling_rules.h"
#include "fp8_ops_test_util.h"

namespace gl_test {
namespace {

namespace fp8 = grouped_linear::fp8;
using grouped_linear::Error;
using grouped_linear::ErrorKind;

const ExecContext kCpu{};
const Device kHost{};

// What quantize_activation must produce, built from quantize.h directly.
struct ActivationExpect {
  Buf row, row_scale, col, col_scale;
  std::vector<float> deq_row, deq_col;     // dequantized, packed [T, C]
  uint32_t scale_bits = 0, amax_bits = 0;  // the state afterwards
};

ActivationExpect expect_activation(const ActivationCase& a, const Buf& scale_in,
                                   const Buf& amax_in) {
  const int64_t t = a.t(), c = a.c();
  std::vector<float> x(static_cast<size_t>(t * c));
  for (int64_t r = 0; r < t; ++r)
    for (int64_t ch = 0; ch < c; ++ch) x[r * c + ch] = a.input(r, ch);
  const Layout l = layout_of(a.sizes);
  ActivationExpect e;
  e.row = a.row;  // the poisoned buffers: stride padding must stay as it is
  e.col = a.col;
  e.row_scale = a.row_scale;
  e.col_scale = a.col_scale;
  e.scale_bits = scale_in.bits(0);
  e.amax_bits = amax_in.bits(0);
  e.deq_row.assign(x.size(), 0.f);
  e.deq_col.assign(x.size(), 0.f);
  // Zero padding after each group; columns past the last group's padding
  // stay as they were (poisoned).
  for (int64_t ch = 0; ch < c && a.columnwise; ++ch)
    for (int64_t j = 0; j < l.column.back(); ++j) e.col.host[ch * a.col_stride + j] = 0;

  if (a.block()) {
    std::vector<uint8_t> q(x.size());
    std::vector<float> s(static_cast<size_t>(t * blocks_of(c)));
    const fp8::BlockLayout bl{t, c, 1, 128};
    fp8::quantize_blockwise(x.data(), bl, a.format, a.power_2, q.data(), s.data());
    fp8::dequantize_blockwise(q.data(), s.data(), bl, a.format, e.deq_row.data());
    if (a.rowwise) {
      for (int64_t r = 0; r < t; ++r)
        for (int64_t ch = 0; ch < c; ++ch) e.row.host[r * a.row_stride + ch] = q[r * c + ch];
      // Block-major scales (fp8_tensor.h): row r's block b at b * T + r.
      for (int64_t r = 0; r < t; ++r)
        for (int64_t b = 0; b < blocks_of(c); ++b)
          std::memcpy(&e.row_scale.host[(b * t + r) * 4], &s[r * blocks_of(c) + b], 4);
    }
    for (size_t g = 0; g < a.sizes.size(); ++g) {
      const int64_t m = a.sizes[g];
      if (m == 0) continue;
      std::vector<float> xt(static_cast<size_t>(c * m)), back(xt.size());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t ch = 0; ch < c; ++ch) xt[ch * m + i] = x[(l.row[g] + i) * c + ch];
      std::vector<uint8_t> qt(xt.size());
      std::vector<float> st(static_cast<size_t>(c * blocks_of(m)));
      const fp8::BlockLayout gl{c, m, 1, 128};
      fp8::quantize_blockwise(xt.data(), gl, a.format, a.power_2, qt.data(), st.data());
      fp8::dequantize_blockwise(qt.data(), st.data(), gl, a.format, back.data());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t ch = 0; ch < c; ++ch) e.deq_col[(l.row[g] + i) * c + ch] = back[ch * m + i];
      if (!a.columnwise) continue;
      for (int64_t ch = 0; ch < c; ++ch) {
        for (int64_t i = 0; i < m; ++i)
          e.col.host[ch * a.col_stride + l.column[g] + i] = qt[ch * m + i];
        for (int64_t b = 0; b < blocks_of(m); ++b)  // block-major: [capacity, C]
          std::memcpy(&e.col_scale.host[((l.block[g] + b) * c + ch) * 4],
                      &st[ch * blocks_of(m) + b], 4);
      }
    }
    return e;
  }

  const float amax = fp8::amax(x.data(), t * c);
  const float scale =
      a.kind == RecipeKind::kDelayed
          ? scale_in.f(0)
          : fp8::scale_from_amax(amax, fp8::format_info(a.format).max, a.margin, 1.f, a.power_2);
  const float scale_inv = 1.f / scale;
  std::vector<uint8_t> q(x.size());
  fp8::quantize(x.data(), t * c, scale, a.format, q.data());
  fp8::dequantize(q.data(), t * c, scale_inv, a.format, e.deq_row.data());
  e.deq_col = e.deq_row;
  if (a.kind == RecipeKind::kCurrent) std::memcpy(&e.scale_bits, &scale, 4);
  if (a.with_amax) {
    const float before = amax_in.f(0);
    const float merged = (std::isnan(before) || std::isnan(amax))
                             ? std::numeric_limits<float>::quiet_NaN()
                             : std::max(before, amax);
    std::memcpy(&e.amax_bits, &merged, 4);
  }
  if (a.rowwise) {
    for (int64_t r = 0; r < t; ++r)
      for (int64_t ch = 0; ch < c; ++ch) e.row.host[r * a.row_stride + ch] = q[r * c + ch];
    std::memcpy(e.row_scale.host.data(), &scale_inv, 4);
  }
  if (a.columnwise) {
    for (size_t g = 0; g < a.sizes.size(); ++g)
      for (int64_t i = 0; i < a.sizes[g]; ++i)
        for (int64_t ch = 0; ch < c; ++ch)
          e.col.host[ch * a.col_stride + l.column[g] + i] = q[(l.row[g] + i) * c + ch];
    std::memcpy(e.col_scale.host.data(), &scale_inv, 4);
  }
  return e;
}

// Dequantizes one copy into a poisoned [T, C + 2] float32 buffer and
// compares with the reference (bits; NaN matches NaN).
void check_dequantize(ActivationCase& a, bool columnwise, const std::vector<float>& want,
                      const std::string& what) {
  const int64_t t = a.t(), c = a.c(), stride = c + 2;
  Buf out;
  out.floats(static_cast<size_t>(t * stride));
  Buf expected = out;
  for (int64_t r = 0; r < t; ++r)
    for (int64_t ch = 0; ch < c; ++ch)
      std::memcpy(&expected.host[(r * stride + ch) * 4], &want[r * c + ch], 4);
  const MatrixView view{out.ptr(false), DType::kFloat32, kHost, t, c, stride};
  fp8::dequantize_activation(a.quantized(false, kHost), columnwise, a.splits(false), view, kCpu);
  expect_same_floats(
      out, expected,
      what + (columnwise ? ": dequantized column-wise copy" : ": dequantized row-wise copy"));
}

// Runs one case on the CPU and checks everything it wrote.
void run_activation_case(ActivationCase& a) {
  SCOPED_TRACE(a.describe());
  const Buf scale_in = a.scale, amax_in = a.amax;
  const ActivationExpect e = expect_activation(a, scale_in, amax_in);
  fp8::quantize_activation(a.request(false, kHost), kCpu);
  if (a.rowwise) {
    expect_same_bytes(a.row, e.row, "row-wise codes");
    expect_same_floats(a.row_scale, e.row_scale, "row-wise scale_inv");
    check_dequantize(a, false, e.deq_row, "quantize.h reference");
  }
  if (a.columnwise) {
    expect_same_bytes(a.col, e.col, "column-wise codes (group offsets, zero padding)");
    expect_same_floats(a.col_scale, e.col_scale, "column-wise scale_inv");
    check_dequantize(a, true, e.deq_col, "quantize.h reference");
  }
  const bool state_nan =
      std::isnan(a.amax.f(0)) && std::isnan(grouped_linear::cpu::bits_to_float(e.amax_bits));
  EXPECT_TRUE(a.amax.bits(0) == e.amax_bits || state_nan) << "state.amax";
  EXPECT_EQ(a.scale.bits(0), e.scale_bits) << "state.scale";
  if (a.with_dbias) check_dbias(a, a.dbias, "CPU");
}

// The exact formulation the CUDA kernels use gives quantize.h's scales.
TEST(Fp8OpsScaling, ExactScaleFromAmaxMatchesTheReference) {
  std::mt19937 rng(seed_for(current_test_name()));
  std::uniform_int_distribution<uint32_t> bits(0, 0x7F7FFFFFu);  // every positive finite float
  const float specials[] = {0.f,
                            -0.f,
                            1e-45f,
                            1e-40f,
                            1.17549435e-38f,
                            3.4e38f,
                            std::numeric_limits<float>::infinity(),
                            std::nanf(""),
                            -1.f};
  std::vector<float> amaxes(std::begin(specials), std::end(specials));
  for (int i = 0; i < 20000; ++i) amaxes.push_back(grouped_linear::cpu::bits_to_float(bits(rng)));
  for (int e = -160; e <= 140; ++e) {
    EXPECT_EQ(fp8::exact_pow2(e), std::ldexp(1.f, e)) << e;
  }
  for (float amax : amaxes)
    for (int margin : {0, 1, 3, -2, 40, 130, 200, -200})
      for (bool power_2 : {false, true})
        for (float fmax : {448.f, 57344.f}) {
          const float want = fp8::scale_from_amax(amax, fmax, margin, 3.f, power_2);
          const float got = fp8::scale_from_amax_exact(amax, fmax, margin, 3.f, power_2);
          ASSERT_EQ(grouped_linear::cpu::float_to_bits(got),
                    grouped_linear::cpu::float_to_bits(want))
              << "amax " << amax << " margin " << margin << " power_2 " << power_2;
        }
}

TEST(Fp8OpsActivation, LayoutsAndBitsMatchTheReference) {
  const uint32_t seed = seed_for(current_test_name());
  SCOPED_TRACE(seed_message(seed));
  std::mt19937 rng(seed);
  for (const ActivationSpec& spec : activation_specs())
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
      for (const KindVariant& v : kind_variants())
        for (Split split : {Split::kRandomWithEmpty, Split::kAllInOne}) {
          ActivationCase a;
          a.spec = spec;
          a.dtype = dtype;
          a.kind = v.kind;
          a.format = v.format;
          a.power_2 = v.power_2;
          a.margin = v.margin;
          a.dbias_dtype = dtype;
          a.make(rng, split, /*specials=*/false);
          run_activation_case(a);
        }
}

// The column-wise copy's groups start at multiples of 32 columns, zeros in
// between: the sm90 FP8 wgrad runs each group's reduction over its padding
// up to the next multiple of 32 (extents of an odd multiple of 16 bytes
// load slowly), so a group of m rows owns round_up(m, 32) columns, zero past
// m (which run_activation_case checks for every case).
TEST(Fp8OpsActivation, ColumnwiseGroupsStartAtMultiplesOf32) {
  EXPECT_EQ(fp8::kGroupAlign, 32);
  const Layout l = layout_of({5, 17, 0, 33, 32, 48});
  EXPECT_EQ(l.column, (std::vector<int64_t>{0, 32, 64, 64, 128, 160, 224}));
  EXPECT_EQ(fp8::padded_columns(135, 6), 352);  // room for any 6 groups of 135 rows
}

// NaN and Inf inputs: codes saturate (Inf -> max) or stay NaN, NaN reaches
// the recorded amax, blocks holding them keep scale 1.
TEST(Fp8OpsActivation, SpecialValues) {
  const uint32_t seed = seed_for(current_test_name());
  SCOPED_TRACE(seed_message(seed));
  std::mt19937 rng(seed);
  for (const ActivationSpec& spec : activation_specs())
    for (const KindVariant& v : kind_variants()) {
      ActivationCase a;
      a.spec = spec;
      a.dtype = DType::kBFloat16;
      a.kind = v.kind;
      a.format = v.format;
      a.power_2 = v.power_2;
      a.margin = v.margin;
      a.dbias_dtype = DType::kFloat32;
      a.make(rng, Split::kRandomWithEmpty, /*specials=*/true);
      run_activation_case(a);
      if (a.t() * a.c() > 0 && a.kind != RecipeKind::kBlock) {
        EXPECT_TRUE(std::isnan(a.amax.f(0))) << "a NaN input must make the recorded amax NaN";
      }
    }
  // A recorded NaN amax stays NaN whatever the new input holds.
  ActivationCase a;
  a.spec = {"small", 20, 8, 2, 0};
  a.make(rng, Split::kRandomWithEmpty, false);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(a.amax.host.data(), &nan, 4);
  fp8::quantize_activation(a.request(false, kHost), kCpu);
  EXPECT_TRUE(std::isnan(a.amax.f(0)));
}

// Only the requested copies are written; dbias alone works too.
TEST(Fp8OpsActivation, CopiesOnRequest) {
  const uint32_t seed = seed_for(current_test_name());
  SCOPED_TRACE(seed_message(seed));
  std::mt19937 rng(seed);
  for (int which = 0; which < 3; ++which)
    for (const KindVariant& v : kind_variants()) {
      ActivationCase a;
      a.spec = {"C130", 300, 130, 5, 3};
      a.kind = v.kind;
      a.format = v.format;
      a.power_2 = v.power_2;
      a.rowwise = which != 1;
      a.columnwise = which != 0;
      a.with_dbias = which != 2;
      a.with_amax = which == 1;
      a.make(rng, Split::kRandomWithEmpty, false);
      run_activation_case(a);
    }
}

// Group sizes on the host and "on the device" (host memory on the CPU, int32
// or int64) give the same bytes.
TEST(Fp8OpsActivation, HostAndDeviceDtypeSplitsAgree) {
  const uint32_t seed = seed_for(current_test_name());
  SCOPED_TRACE(seed_message(seed));
  for (const ActivationSpec& spec : activation_specs())
    for (const KindVariant& v : kind_variants()) {
      std::vector<ActivationCase> runs;
      for (SplitsAt at : {SplitsAt::kHost, SplitsAt::kDeviceInt64, SplitsAt::kDeviceInt32}) {
        std::mt19937 rng(seed);  // the same data each time
        ActivationCase a;
        a.spec = spec;
        a.kind = v.kind;
        a.format = v.format;
        a.power_2 = v.power_2;
        a.margin = v.margin;
        a.splits_at = at;
        a.make(rng, Split::kRandomWithEmpty, false);
        fp8::quantize_activation(a.request(false, kHost), kCpu);
        runs.push_back(a);
      }
      for (size_t i = 1; i < runs.size(); ++i) {
        SCOPED_TRACE(runs[i].describe());
        expect_same_bytes(runs[i].row, runs[0].row, "row-wise codes");
        expect_same_bytes(runs[i].col, runs[0].col, "column-wise codes");
        expect_same_bytes(runs[i].col_scale, runs[0].col_scale, "column-wise scales");
        expect_same_bytes(runs[i].dbias, runs[0].dbias, "dbias");
        expect_same_bytes(runs[i].amax, runs[0].amax, "amax");
      }
    }
}

// Device sizes are clamped as the CUDA kernels clamp them (negative -> 0,
// rows past T dropped); rows outside every group dequantize to 0.
TEST(Fp8OpsActivation, DeviceSizesAreClamped) {
  ActivationCase a;
  a.spec = {"clamp", 40, 9, 4, 0};
  a.splits_at = SplitsAt::kDeviceInt64;
  a.kind = RecipeKind::kBlock;
  std::mt19937 rng(5);
  a.make(rng, Split::kRandomWithEmpty, false);
  const int64_t bad[] = {10, -3, 25, 100};  // clamps to 10, 0, 25, 5
  std::memcpy(a.sizes_buf.host.data(), bad, sizeof(bad));
  fp8::quantize_activation(a.request(false, kHost), kCpu);
  // The same data with the clamped sizes on the host.
  std::mt19937 rng2(5);
  ActivationCase ref;
  ref.spec = a.spec;
  ref.kind = a.kind;
  ref.make(rng2, Split::kRandomWithEmpty, false);
  ref.sizes = {10, 0, 25, 5};
  fp8::quantize_activation(ref.request(false, kHost), kCpu);
  expect_same_bytes(a.col, ref.col, "clamped column-wise codes");
  expect_same_bytes(a.col_scale, ref.col_scale, "clamped column-wise scales");
  expect_same_bytes(a.dbias, ref.dbias, "clamped dbias");
  const int64_t short_sizes[] = {10, 0, 20, 0};  // 30 of 40 rows
  std::memcpy(a.sizes_buf.host.data(), short_sizes, sizeof(short_sizes));
  fp8::quantize_activation(a.request(false, kHost), kCpu);
  Buf out;
  out.floats(static_cast<size_t>(a.t() * a.c()));
  fp8::dequantize_activation(
      a.quantized(false, kHost), true, a.splits(false),
      MatrixView{out.ptr(false), DType::kFloat32, kHost, a.t(), a.c(), a.c()}, kCpu);
  for (int64_t i = 30 * a.c(); i < a.t() * a.c(); ++i) EXPECT_EQ(out.bits(i), 0u) << i;
}

void run_weight_case(WeightCase& w) {
  SCOPED_TRACE(w.describe());
  const int64_t g_ = w.g(), n = w.n(), k = w.k();
  WeightCase e = w;  // expected buffers, from the poisoned ones
  std::vector<std::vector<float>> deq(static_cast<size_t>(g_));
  for (int64_t gi = 0; gi < g_; ++gi) {
    std::vector<float> x(static_cast<size_t>(n * k));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t ch = 0; ch < k; ++ch) x[r * k + ch] = w.input(gi, r, ch);
    std::vector<uint8_t> q(x.size());
    deq[gi].resize(x.size());
    std::vector<float> row_s, col_s;
    if (w.block()) {
      const int64_t nb = blocks_of(n), kb = blocks_of(k);
      const fp8::BlockLayout bl{n, k, 128, 128};
      std::vector<float> s(static_cast<size_t>(nb * kb));
      fp8::quantize_blockwise(x.data(), bl, w.format, w.power_2, q.data(), s.data());
      fp8::dequantize_blockwise(q.data(), s.data(), bl, w.format, deq[gi].data());
      row_s = s;
      col_s.resize(s.size());
      for (int64_t i = 0; i < nb; ++i)
        for (int64_t j = 0; j < kb; ++j) col_s[j * nb + i] = s[i * kb + j];
    } else {
      const float amax = fp8::amax(x.data(), n * k);
      const float scale = w.kind == RecipeKind::kDelayed
                              ? w.scale.f(gi)
                              : fp8::scale_from_amax(amax, fp8::format_info(w.format).max, w.margin,
                                                     1.f, w.power_2);
      fp8::quantize(x.data(), n * k, scale, w.format, q.data());
      fp8::dequantize(q.data(), n * k, 1.f / scale, w.format, deq[gi].data());
      row_s = col_s = {1.f / scale};
      if (w.kind == RecipeKind::kCurrent) std::memcpy(&e.scale.host[gi * 4], &scale, 4);
      if (w.with_amax) {
        const float before = w.amax.f(gi);
        const float merged = (std::isnan(before) || std::isnan(amax))
                                 ? std::numeric_limits<float>::quiet_NaN()
                                 : std::max(before, amax);
        std::memcpy(&e.amax.host[gi * 4], &merged, 4);
      }
    }
    for (int64_t r = 0; r < n; ++r)
      for (int64_t ch = 0; ch < k; ++ch) {
        if (w.rowwise) e.row.host[gi * w.row_gstride + r * w.row_stride + ch] = q[r * k + ch];
        if (w.columnwise) e.col.host[gi * w.col_gstride + ch * w.col_stride + r] = q[r * k + ch];
      }
    for (size_t i = 0; i < row_s.size(); ++i) {
      if (w.rowwise)
        std::memcpy(&e.row_scale.host[(gi * w.scales_per_group + i) * 4], &row_s[i], 4);
      if (w.columnwise)
        std::memcpy(&e.col_scale.host[(gi * w.scales_per_group + i) * 4], &col_s[i], 4);
    }
  }
  fp8::quantize_weight(w.request(false, kHost), kCpu);
  expect_same_bytes(w.row, e.row, "row-wise codes");
  expect_same_bytes(w.col, e.col, "column-wise codes (transposed groups)");
  expect_same_floats(w.row_scale, e.row_scale, "row-wise scale_inv");
  expect_same_floats(w.col_scale, e.col_scale, "column-wise scale_inv");
  expect_same_floats(w.scale, e.scale, "state.scale");
  expect_same_floats(w.amax, e.amax, "state.amax");
  for (bool columnwise : {false, true}) {
    if (!(columnwise ? w.columnwise : w.rowwise)) continue;
    const int64_t stride = k + 1, gstride = n * stride + 3;
    Buf out;
    out.floats(static_cast<size_t>(g_ * gstride));
    Buf want = out;
    for (int64_t gi = 0; gi < g_; ++gi)
      for (int64_t r = 0; r < n; ++r)
        for (int64_t ch = 0; ch < k; ++ch)
          std::memcpy(&want.host[(gi * gstride + r * stride + ch) * 4], &deq[gi][r * k + ch], 4);
    fp8::dequantize_weight(
        w.quantized(false, kHost), columnwise,
        GroupedMatrixView{out.ptr(false), DType::kFloat32, kHost, g_, n, k, stride, gstride, true},
        kCpu);
    expect_same_floats(
        out, want, columnwise ? "dequantized column-wise weight" : "dequantized row-wise weight");
  }
}

TEST(Fp8OpsWeight, LayoutsAndBitsMatchTheReference) {
  const uint32_t seed = seed_for(current_test_name());
  SCOPED_TRACE(seed_message(seed));
  std::mt19937 rng(seed);
  for (const WeightSpec& spec : weight_specs())
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
      for (const KindVariant& v : kind_variants())
        for (bool specials : {false, true}) {
          WeightCase w;
          w.spec = spec;
          w.dtype = dtype;
          w.kind = v.kind;
          w.format = v.format;
          w.power_2 = v.power_2;
          w.margin = v.margin;
          w.make(rng, specials);
          run_weight_case(w);
        }
}

TEST(Fp8OpsWeight, OneCopyOnly) {
  std::mt19937 rng(11);
  for (bool rowwise : {false, true})
    for (const KindVariant& v : kind_variants()) {
      WeightCase w;
      w.spec = {"K200", 3, 130, 200, 0};
      w.kind = v.kind;
      w.format = v.format;
      w.rowwise = rowwise;
      w.columnwise = !rowwise;
      w.with_amax = false;
      w.make(rng, false);
      run_weight_case(w);
    }
}

// Random histories for `count` sets with different formats; one set holds
// a non-finite amax when `poison_set` >= 0.
struct DelayedSets {
  std::vector<std::vector<float>> history, scale, scale_inv;
  std::vector<fp8::DelayedScalingUpdate> sets;

  DelayedSets(std::mt19937& rng, int count) {
    for (int i = 0; i < count; ++i) {
      const int64_t len = 1 + i % 5, n = (i * 7) % 13;  // n = 0 included
      std::uniform_real_distribution<float> v(0.f, 100.f);
      history.emplace_back(static_cast<size_t>(len * n));
      for (float& h : history.back()) h = v(rng) < 10.f ? 0.f : v(rng);
      scale.emplace_back(static_cast<size_t>(n), 2.f);
      scale_inv.emplace_back(static_cast<size_t>(n), 0.5f);
    }
    for (int i = 0; i < count; ++i) {
      const int64_t n = static_cast<int64_t>(scale[i].size());
      fp8::DelayedScalingUpdate u;
      u.group = fp8::DelayedScalingGroup{
          history[i].data(), scale[i].data(), scale_inv[i].data(),
          n == 0 ? 1 + i % 5 : static_cast<int64_t>(history[i].size()) / n, n};
      u.fp8_max = fp8::format_info(i % 2 ? Format::kE5M2 : Format::kE4M3).max;
      sets.push_back(u);
    }
  }
};

TEST(Fp8OpsDelayedScaling, FusedUpdateMatchesThePerSetReference) {
  std::mt19937 rng(seed_for(current_test_name()));
  for (fp8::AmaxAlgo algo : {fp8::AmaxAlgo::kMax, fp8::AmaxAlgo::kMostRecent}) {
    DelayedSets fused(rng, 9);
    DelayedSets ref = fused;
    for (int i = 0; i < 9; ++i) {
      ref.sets[i].group.history = ref.history[i].data();
      ref.sets[i].group.scale = ref.scale[i].data();
      ref.sets[i].group.scale_inv = ref.scale_inv[i].data();
    }
    fp8::update_delayed_scaling(fused.sets.data(), 9, 1, algo, false, kCpu);
    for (int i = 0; i < 9; ++i)
      fp8::update_delayed_scaling(ref.sets[i].group, ref.sets[i].fp8_max, 1, algo, false);
    EXPECT_EQ(fused.history, ref.history);
    EXPECT_EQ(fused.scale, ref.scale);
    EXPECT_EQ(fused.scale_inv, ref.scale_inv);
  }
}

TEST(Fp8OpsDelayedScaling, CheckFiniteNamesTheTensorAndUpdatesNothing) {
  std::mt19937 rng(seed_for(current_test_name()));
  DelayedSets d(rng, 6);
  d.history[3][d.scale[3].size() + 1] = std::numeric_limits<float>::infinity();  // row 1, tensor 1
  const DelayedSets before = d;
  try {
    fp8::update_delayed_scaling(d.sets.data(), 6, 0, fp8::AmaxAlgo::kMax, true, kCpu);
    ADD_FAILURE() << "a non-finite amax was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_NE(std::string(e.what()).find("tensor 1 of set 3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(d.history, before.history);
  EXPECT_EQ(d.scale, before.scale);
  EXPECT_EQ(d.scale_inv, before.scale_inv);
  // kMostRecent looks at row 0 only: the same history passes.
  fp8::update_delayed_scaling(d.sets.data(), 6, 0, fp8::AmaxAlgo::kMostRecent, true, kCpu);
}

template <typename Fn>
void expect_error(ErrorKind kind, const std::string& fragment, Fn fn) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Fp8OpsErrors, RequestsAreValidatedBeforeWriting) {
  std::mt19937 rng(3);
  ActivationCase a;
  a.spec = {"small", 20, 8, 2, 0};
  a.make(rng, Split::kRandomWithEmpty, false);
  const ActivationCase untouched = a;
  {
    ActivationQuantize r = a.request(false, kHost);
    r.out.columnwise.cols -= 1;
    expect_error(ErrorKind::kValue, "columnwise", [&] { fp8::quantize_activation(r, kCpu); });
  }
  {
    ActivationQuantize r = a.request(false, kHost);
    r.state.scale = nullptr;
    expect_error(ErrorKind::kValue, "state.scale", [&] { fp8::quantize_activation(r, kCpu); });
  }
  {
    ActivationQuantize r = a.request(false, kHost);
    r.out.rowwise.dtype = DType::kFloat8E5M2;
    expect_error(ErrorKind::kType, "rowwise", [&] { fp8::quantize_activation(r, kCpu); });
  }
  {
    ActivationQuantize r = a.request(false, kHost);
    r.kind = RecipeKind::kBlock;  // the scales are laid out per tensor
    expect_error(ErrorKind::kValue, "block", [&] { fp8::quantize_activation(r, kCpu); });
  }
  {
    std::vector<int64_t> bad = a.sizes;
    bad[0] += 1;
    ActivationQuantize r = a.request(false, kHost);
    r.splits.host = bad.data();
    expect_error(ErrorKind::kValue, "m_splits", [&] { fp8::quantize_activation(r, kCpu); });
  }
  expect_same_bytes(a.row, untouched.row, "row-wise codes after failed calls");
  expect_same_bytes(a.col, untouched.col, "column-wise codes after failed calls");
  // gl_core alone has no CUDA implementation registered.
  ExecContext cuda;
  cuda.device = Device{grouped_linear::DeviceType::kCUDA, 0};
  const Device gpu = cuda.device;
  expect_error(ErrorKind::kValue, "not available",
               [&] { fp8::quantize_activation(a.request(false, gpu), cuda); });
  // A view on another device than the call's.
  expect_error(ErrorKind::kValue, "same device",
               [&] { fp8::quantize_activation(a.request(false, gpu), kCpu); });
}

// X and W of a forward as one operation: the bits and states of the two
// casts in turn, and both requests checked before either is written.
TEST(Fp8OpsForward, BothOperandsAsOneOperation) {
  std::mt19937 rng(11);
  for (const KindVariant& v : kind_variants()) {
    ActivationCase a;
    a.spec = {"x", 150, 200, 3, 1};
    apply_variant(a, v);
    a.with_dbias = false;
    a.make(rng, Split::kRandomWithEmpty, false);
    WeightCase w;
    w.spec = {"w", 3, 130, 200, 0};
    apply_variant(w, v);
    w.make(rng, false);
    ActivationCase a_alone = a;
    WeightCase w_alone = w;
    fp8::quantize_forward_operands(a.request(false, kHost), w.request(false, kHost), kCpu);
    fp8::quantize_activation(a_alone.request(false, kHost), kCpu);
    fp8::quantize_weight(w_alone.request(false, kHost), kCpu);
    expect_same_forward_operands(a, a_alone, w, w_alone);

    const ActivationCase untouched = a;
    WeightQuantize bad = w.request(false, kHost);
    bad.out.rowwise.cols -= 1;
    expect_error(ErrorKind::kValue, "rowwise",
                 [&] { fp8::quantize_forward_operands(a.request(false, kHost), bad, kCpu); });
    expect_same_bytes(a.row, untouched.row, "X codes after a failed call");
    expect_same_floats(a.amax, untouched.amax, "X state.amax after a failed call");
  }
}

}  // namespace
}  // namespace gl_test
