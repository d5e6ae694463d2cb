// Random FP8 quantization requests with all their buffers in host memory,
// shared by the CPU tests (test_fp8_ops.cpp) and the CUDA ones
// (test_fp8_ops_cuda.cpp), which copy every buffer to the device, run the
// same request there and compare bytes. Outputs start poisoned (codes 0xAA,
// floats a NaN with a payload), so an element nobody wrote shows.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu/float_convert.h"
#include "core/fp8/delayed_scaling_ops.h"
#include "core/fp8/quantize.h"
#include "core/fp8/quantize_ops.h"
#include "test_util.h"

namespace gl_test {

using grouped_linear::Device;
using grouped_linear::ExecContext;
using grouped_linear::fp8::ActivationQuantize;
using grouped_linear::fp8::Format;
using grouped_linear::fp8::QuantizedActivation;
using grouped_linear::fp8::QuantizedWeight;
using grouped_linear::fp8::RecipeKind;
using grouped_linear::fp8::ScaleLayout;
using grouped_linear::fp8::ScaleView;
using grouped_linear::fp8::WeightQuantize;

constexpr uint8_t kCodePoison = 0xAA;
constexpr uint32_t kFloatPoison = 0x7fc0deadu;
constexpr int64_t kBlk = 128;

inline int64_t blocks_of(int64_t n) { return (n + kBlk - 1) / kBlk; }

// Bytes in host memory and, for the CUDA tests, their device copy.
struct Buf {
  std::vector<uint8_t> host;
  void* dev = nullptr;

  void* ptr(bool on_device) {
    if (on_device) return dev;
    return host.empty() ? nullptr : host.data();
  }
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(host.data());
  }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(host.data());
  }
  size_t size() const { return host.size(); }
  void codes(size_t n) { host.assign(n, kCodePoison); }
  void floats(size_t n) {
    host.resize(n * 4);
    for (size_t i = 0; i < n; ++i) std::memcpy(&host[i * 4], &kFloatPoison, 4);
  }
  float f(size_t i) const {
    float v;
    std::memcpy(&v, &host[i * 4], 4);
    return v;
  }
  uint32_t bits(size_t i) const {
    uint32_t v;
    std::memcpy(&v, &host[i * 4], 4);
    return v;
  }
};

// An input element: a random sign and magnitude over a wide range of
// exponents (so blocks get different scales), or a special value.
inline float random_value(std::mt19937& rng, int spread) {
  std::uniform_real_distribution<float> mantissa(0.5f, 1.0f);
  std::uniform_int_distribution<int> exponent(-spread, spread);
  std::bernoulli_distribution negative(0.5);
  const float v = std::ldexp(mantissa(rng), exponent(rng));
  return negative(rng) ? -v : v;
}

// Stores `value` as `dtype` at element i of `buf`.
inline void put(Buf& buf, DType dtype, int64_t i, float value) {
  namespace cpu = grouped_linear::cpu;
  if (dtype == DType::kFloat32) {
    std::memcpy(&buf.host[i * 4], &value, 4);
    return;
  }
  const uint16_t bits =
      dtype == DType::kFloat16 ? cpu::float_to_fp16(value) : cpu::float_to_bf16(value);
  std::memcpy(&buf.host[i * 2], &bits, 2);
}

inline float get(const Buf& buf, DType dtype, int64_t i) {
  namespace cpu = grouped_linear::cpu;
  if (dtype == DType::kFloat32) return buf.f(static_cast<size_t>(i));
  uint16_t bits;
  std::memcpy(&bits, &buf.host[i * 2], 2);
  return dtype == DType::kFloat16 ? cpu::fp16_to_float(bits) : cpu::bf16_to_float(bits);
}

// Where the quantize ops find the group sizes.
enum class SplitsAt { kHost, kDeviceInt64, kDeviceInt32 };

inline const char* splits_at_name(SplitsAt at) {
  switch (at) {
    case SplitsAt::kHost: return "sizes on the host";
    case SplitsAt::kDeviceInt64: return "sizes in device memory, int64";
    case SplitsAt::kDeviceInt32: return "sizes in device memory, int32";
  }
  return "?";
}

struct ActivationSpec {
  const char* name;
  int64_t t, c, g;
  int64_t pad;  // extra elements per row of the input and of every code matrix
};

inline std::vector<ActivationSpec> activation_specs() {
  return {
      {"T0", 0, 16, 3, 0},          // no rows: every group empty, the copy is all padding
      {"C1", 37, 1, 4, 0},          // one column
      {"C130", 300, 130, 5, 3},     // partial column blocks, strided, groups over 128 rows
      {"C200G1", 150, 200, 1, 0},   // one group
      {"G300", 500, 24, 300, 1},    // many small groups (most shorter than 16)
      {"Aligned", 384, 256, 3, 0},  // multiples of 16 / 128: vectorised paths
      {"Long", 1100, 40, 2, 5},     // a group spanning many 128-row blocks
  };
}

// A quantize_activation request and its buffers.
struct ActivationCase {
  ActivationSpec spec;
  DType dtype = DType::kBFloat16;
  RecipeKind kind = RecipeKind::kDelayed;
  Format format = Format::kE4M3;
  bool power_2 = false;
  int margin = 0;
  bool rowwise = true, columnwise = true, with_dbias = true, with_amax = true;
  DType dbias_dtype = DType::kFloat32;
  SplitsAt splits_at = SplitsAt::kHost;

  std::vector<int64_t> sizes;
  Buf x;  // [T, C], row stride c + pad
  Buf row, row_scale, col, col_scale, dbias, scale, amax, sizes_buf;
  int64_t x_stride = 0, row_stride = 0, col_cols = 0, col_stride = 0, capacity = 0;

  int64_t t() const { return spec.t; }
  int64_t c() const { return spec.c; }
  int64_t g() const { return spec.g; }
  bool block() const { return kind == RecipeKind::kBlock; }
  float input(int64_t r, int64_t ch) const { return get(x, dtype, r * x_stride + ch); }

  // Sizes, random inputs (with `specials` NaN / Inf / huge values sprinkled
  // in), poisoned outputs.
  void make(std::mt19937& rng, Split split, bool specials) {
    const int64_t t_ = t(), c_ = c(), g_ = g();
    sizes = make_splits(rng, t_, g_, split);
    x_stride = c_ + spec.pad;
    x.host.assign(static_cast<size_t>(t_ * x_stride) * grouped_linear::element_size(dtype), 0);
    for (int64_t i = 0; i < t_ * x_stride; ++i) put(x, dtype, i, std::nanf(""));  // padding
    const int spread = dtype == DType::kFloat16 ? 6 : 12;
    for (int64_t r = 0; r < t_; ++r)
      for (int64_t ch = 0; ch < c_; ++ch)
        put(x, dtype, r * x_stride + ch, random_value(rng, spread));
    if (specials && t_ * c_ > 0) {
      const float inf = std::numeric_limits<float>::infinity();
      const float values[] = {std::nanf(""), -std::nanf(""), inf, -inf, 3e4f, -6e4f, 0.f, -0.f};
      std::uniform_int_distribution<int64_t> row_of(0, t_ - 1), col_of(0, c_ - 1);
      for (float v : values) put(x, dtype, row_of(rng) * x_stride + col_of(rng), v);
    }
    row_stride = c_ + spec.pad;
    col_cols = grouped_linear::fp8::padded_columns(t_, g_);
    col_stride = col_cols + spec.pad;
    capacity = grouped_linear::fp8::column_block_capacity(t_, g_);
    row.codes(rowwise ? static_cast<size_t>(t_ * row_stride) : 0);
    row_scale.floats(rowwise ? static_cast<size_t>(block() ? t_ * blocks_of(c_) : 1) : 0);
    col.codes(columnwise ? static_cast<size_t>(c_ * col_stride) : 0);
    col_scale.floats(columnwise ? static_cast<size_t>(block() ? c_ * capacity : 1) : 0);
    dbias.host.assign(
        with_dbias ? static_cast<size_t>(g_ * c_) * grouped_linear::element_size(dbias_dtype) : 0,
        0xA5);
    scale.floats(1);
    amax.floats(1);
    const float s = std::ldexp(1.f, std::uniform_int_distribution<int>(-3, 6)(rng)) * 1.375f;
    std::memcpy(scale.host.data(), &s, 4);
    const float previous = 0.25f;  // a recorded amax to accumulate into
    std::memcpy(amax.host.data(), &previous, 4);
    use_sizes(sizes);
  }

  // Replaces the group sizes (G of them, summing to T) after make(), in
  // `sizes` and in the device-sizes buffer, so a test can pin a split.
  void use_sizes(const std::vector<int64_t>& pinned) {
    sizes = pinned;
    sizes_buf.host.clear();
    if (splits_at == SplitsAt::kDeviceInt32) {
      sizes_buf.host.resize(sizes.size() * 4);
      for (size_t i = 0; i < sizes.size(); ++i) {
        const int32_t v = static_cast<int32_t>(sizes[i]);
        std::memcpy(&sizes_buf.host[i * 4], &v, 4);
      }
    } else if (splits_at == SplitsAt::kDeviceInt64) {
      sizes_buf.host.resize(sizes.size() * 8);
      if (!sizes.empty()) std::memcpy(sizes_buf.host.data(), sizes.data(), sizes.size() * 8);
    }
  }

  std::vector<Buf*> buffers() {
    return {&x, &row, &row_scale, &col, &col_scale, &dbias, &scale, &amax, &sizes_buf};
  }

  GroupSizes splits(bool on_device) {
    GroupSizes s;
    s.num_groups = g();
    if (splits_at == SplitsAt::kHost) {
      s.host = sizes.data();
    } else {
      s.device = sizes_buf.ptr(on_device);
      s.device_dtype = splits_at == SplitsAt::kDeviceInt32 ? DType::kInt32 : DType::kInt64;
    }
    return s;
  }

  QuantizedActivation quantized(bool on_device, Device device) {
    QuantizedActivation q;
    q.format = format;
    const ScaleLayout layout = block() ? ScaleLayout::kBlock : ScaleLayout::kPerTensor;
    const int br = block() ? 1 : 0, bc = block() ? 128 : 0;
    if (rowwise) {
      q.rowwise =
          MatrixView{row.ptr(on_device), grouped_linear::fp8::code_dtype(format), device, t(), c(),
                     row_stride};
      q.rowwise_scale = ScaleView{static_cast<float*>(row_scale.ptr(on_device)), layout, br, bc};
    }
    if (columnwise) {
      q.columnwise = MatrixView{
          col.ptr(on_device), grouped_linear::fp8::code_dtype(format), device, c(), col_cols,
          col_stride};
      q.columnwise_scale = ScaleView{static_cast<float*>(col_scale.ptr(on_device)), layout, br, bc};
    }
    return q;
  }

  ActivationQuantize request(bool on_device, Device device) {
    ActivationQuantize r;
    r.input = MatrixView{x.ptr(on_device), dtype, device, t(), c(), x_stride};
    r.splits = splits(on_device);
    r.kind = kind;
    r.format = format;
    r.margin = margin;
    r.power_2_scales = power_2;
    r.state.scale = static_cast<float*>(scale.ptr(on_device));
    r.state.amax = with_amax ? static_cast<float*>(amax.ptr(on_device)) : nullptr;
    r.out = quantized(on_device, device);
    if (with_dbias) {
      r.dbias.data = dbias.ptr(on_device);
      r.dbias.dtype = dbias_dtype;
      r.dbias.device = device;
      r.dbias.groups = g();
      r.dbias.rows = 1;
      r.dbias.cols = c();
      r.dbias.row_stride = c();
      r.dbias.group_stride = c();
      r.dbias.present = true;
    }
    return r;
  }

  std::string describe() const {
    std::string s = std::string(spec.name) + " " + short_name(dtype) + " kind " +
                    std::to_string(static_cast<int>(kind)) +
                    (format == Format::kE4M3 ? " e4m3" : " e5m2") + (power_2 ? " pow2" : "") +
                    " margin " + std::to_string(margin) + " " + splits_at_name(splits_at) + " " +
                    sizes_text(sizes);
    return s;
  }
};

struct WeightSpec {
  const char* name;
  int64_t g, n, k, pad;
};

inline std::vector<WeightSpec> weight_specs() {
  return {
      {"K200", 3, 130, 200, 0},  // partial 128 blocks both ways
      {"N1", 2, 1, 37, 1},       // one row
      {"G1Aligned", 1, 256, 128, 0},
      {"FullTiles", 3, 256, 384, 0},   // 128 x 128 tiles with aligned strides: CUDA's wide path
      {"MixedTiles", 2, 256, 200, 0},  // full tiles beside partial ones, aligned strides
      {"Strided", 4, 33, 20, 7},
      {"Empty", 2, 0, 16, 0},  // no rows: only the scales are written
      {"G0", 0, 8, 8, 0},
  };
}

// A quantize_weight request and its buffers.
struct WeightCase {
  WeightSpec spec;
  DType dtype = DType::kBFloat16;
  RecipeKind kind = RecipeKind::kDelayed;
  Format format = Format::kE4M3;
  bool power_2 = false;
  int margin = 0;
  bool rowwise = true, columnwise = true, with_amax = true;

  Buf w, row, row_scale, col, col_scale, scale, amax;
  int64_t w_stride = 0, w_gstride = 0, row_stride = 0, row_gstride = 0, col_stride = 0,
          col_gstride = 0, scales_per_group = 0;

  int64_t g() const { return spec.g; }
  int64_t n() const { return spec.n; }
  int64_t k() const { return spec.k; }
  bool block() const { return kind == RecipeKind::kBlock; }
  float input(int64_t gi, int64_t r, int64_t ch) const {
    return get(w, dtype, gi * w_gstride + r * w_stride + ch);
  }

  void make(std::mt19937& rng, bool specials) {
    const int64_t g_ = g(), n_ = n(), k_ = k(), pad = spec.pad;
    w_stride = k_ + pad;
    w_gstride = n_ * w_stride + 2 * pad;
    w.host.assign(static_cast<size_t>(g_ * w_gstride) * grouped_linear::element_size(dtype), 0);
    for (int64_t i = 0; i < g_ * w_gstride; ++i) put(w, dtype, i, std::nanf(""));
    const int spread = dtype == DType::kFloat16 ? 6 : 12;
    for (int64_t gi = 0; gi < g_; ++gi)
      for (int64_t r = 0; r < n_; ++r)
        for (int64_t ch = 0; ch < k_; ++ch)
          put(w, dtype, gi * w_gstride + r * w_stride + ch, random_value(rng, spread));
    if (specials && g_ * n_ * k_ > 0) {
      const float inf = std::numeric_limits<float>::infinity();
      const float values[] = {std::nanf(""), -std::nanf(""), inf, -inf, 3e4f, 0.f};
      std::uniform_int_distribution<int64_t> g_of(0, g_ - 1), r_of(0, n_ - 1), c_of(0, k_ - 1);
      for (float v : values)
        put(w, dtype, g_of(rng) * w_gstride + r_of(rng) * w_stride + c_of(rng), v);
    }
    row_stride = k_ + pad;
    row_gstride = n_ * row_stride + pad;
    col_stride = n_ + pad;
    col_gstride = k_ * col_stride + pad;
    scales_per_group = block() ? blocks_of(n_) * blocks_of(k_) : 1;
    row.codes(rowwise ? static_cast<size_t>(g_ * row_gstride) : 0);
    col.codes(columnwise ? static_cast<size_t>(g_ * col_gstride) : 0);
    row_scale.floats(rowwise ? static_cast<size_t>(g_ * scales_per_group) : 0);
    col_scale.floats(columnwise ? static_cast<size_t>(g_ * scales_per_group) : 0);
    scale.floats(static_cast<size_t>(g_));
    amax.floats(static_cast<size_t>(g_));
    for (int64_t gi = 0; gi < g_; ++gi) {
      const float s = std::ldexp(1.f, std::uniform_int_distribution<int>(-3, 6)(rng)) * 1.625f;
      const float previous = gi % 2 ? 0.5f : 0.f;
      std::memcpy(&scale.host[gi * 4], &s, 4);
      std::memcpy(&amax.host[gi * 4], &previous, 4);
    }
  }

  std::vector<Buf*> buffers() { return {&w, &row, &row_scale, &col, &col_scale, &scale, &amax}; }

  QuantizedWeight quantized(bool on_device, Device device) {
    QuantizedWeight q;
    q.format = format;
    const ScaleLayout layout = block() ? ScaleLayout::kBlock : ScaleLayout::kPerTensor;
    const int b = block() ? 128 : 0;
    const DType code = grouped_linear::fp8::code_dtype(format);
    if (rowwise) {
      q.rowwise = GroupedMatrixView{row.ptr(on_device), code,        device, g(), n(), k(),
                                    row_stride,         row_gstride, true};
      q.rowwise_scale = ScaleView{static_cast<float*>(row_scale.ptr(on_device)), layout, b, b};
    }
    if (columnwise) {
      q.columnwise = GroupedMatrixView{col.ptr(on_device), code,        device, g(), k(), n(),
                                       col_stride,         col_gstride, true};
      q.columnwise_scale = ScaleView{static_cast<float*>(col_scale.ptr(on_device)), layout, b, b};
    }
    return q;
  }

  WeightQuantize request(bool on_device, Device device) {
    WeightQuantize r;
    r.input = GroupedMatrixView{w.ptr(on_device), dtype,     device, g(), n(), k(),
                                w_stride,         w_gstride, true};
    r.kind = kind;
    r.format = format;
    r.margin = margin;
    r.power_2_scales = power_2;
    r.state.scale = static_cast<float*>(scale.ptr(on_device));
    r.state.amax = with_amax ? static_cast<float*>(amax.ptr(on_device)) : nullptr;
    r.out = quantized(on_device, device);
    return r;
  }

  std::string describe() const {
    return std::string(spec.name) + " " + short_name(dtype) + " kind " +
           std::to_string(static_cast<int>(kind)) + (format == Format::kE4M3 ? " e4m3" : " e5m2") +
           (power_2 ? " pow2" : "") + " margin " + std::to_string(margin);
  }
};

// The recipe variants every layout is run with.
struct KindVariant {
  RecipeKind kind;
  Format format;
  bool power_2;
  int margin;
};

inline std::vector<KindVariant> kind_variants() {
  return {
      {RecipeKind::kDelayed, Format::kE4M3, false, 0},
      {RecipeKind::kCurrent, Format::kE4M3, false, 0},
      {RecipeKind::kCurrent, Format::kE5M2, true, 2},
      {RecipeKind::kBlock, Format::kE4M3, false, 0},
      {RecipeKind::kBlock, Format::kE5M2, true, 0},
  };
}

// Byte for byte; reports the first few differences.
inline void expect_same_bytes(const Buf& got, const Buf& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t wrong = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i)
    if (got.host[i] != want.host[i]) {
      if (wrong < 5)
        first += " [" + std::to_string(i) + "] " + std::to_string(got.host[i]) + " vs " +
                 std::to_string(want.host[i]);
      ++wrong;
    }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " bytes differ:" << first;
}

// Float buffers bit for bit, except that any NaN matches any NaN.
inline void expect_same_floats(const Buf& got, const Buf& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t wrong = 0;
  std::string first;
  for (size_t i = 0; i < got.size() / 4; ++i) {
    const float a = got.f(i), b = want.f(i);
    const bool same = (std::isnan(a) && std::isnan(b) && got.bits(i) != kFloatPoison &&
                       want.bits(i) != kFloatPoison) ||
                      got.bits(i) == want.bits(i);
    if (!same) {
      // "poison": the output still holds the value the test put there, i.e.
      // nothing wrote it (or the write was lost), as opposed to a NaN written.
      if (wrong < 5)
        first += " [" + std::to_string(i) + "] " +
                 (got.bits(i) == kFloatPoison ? std::string("poison") : std::to_string(a)) +
                 " vs " +
                 (want.bits(i) == kFloatPoison ? std::string("poison") : std::to_string(b));
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " floats differ:" << first;
}

// A variant's recipe fields on a case (ActivationCase, WeightCase).
template <class Case>
void apply_variant(Case& c, const KindVariant& v) {
  c.kind = v.kind;
  c.format = v.format;
  c.power_2 = v.power_2;
  c.margin = v.margin;
}

// A forward's two quantized operands against another pair: codes, scales
// and both states.
inline void expect_same_forward_operands(const ActivationCase& a, const ActivationCase& a_want,
                                         const WeightCase& w, const WeightCase& w_want) {
  expect_same_bytes(a.row, a_want.row, "X row-wise codes");
  expect_same_floats(a.row_scale, a_want.row_scale, "X row-wise scale_inv");
  expect_same_bytes(a.col, a_want.col, "X column-wise codes");
  expect_same_floats(a.col_scale, a_want.col_scale, "X column-wise scale_inv");
  expect_same_floats(a.scale, a_want.scale, "X state.scale");
  expect_same_floats(a.amax, a_want.amax, "X state.amax");
  expect_same_bytes(w.row, w_want.row, "W row-wise codes");
  expect_same_bytes(w.col, w_want.col, "W column-wise codes");
  expect_same_floats(w.row_scale, w_want.row_scale, "W row-wise scale_inv");
  expect_same_floats(w.col_scale, w_want.col_scale, "W column-wise scale_inv");
  expect_same_floats(w.scale, w_want.scale, "W state.scale");
  expect_same_floats(w.amax, w_want.amax, "W state.amax");
}

struct Layout {
  std::vector<int64_t> row, column, block;  // G + 1 prefix sums
};

inline Layout layout_of(const std::vector<int64_t>& sizes) {
  Layout l{{0}, {0}, {0}};
  for (int64_t m : sizes) {
    l.row.push_back(l.row.back() + m);
    l.column.push_back(l.column.back() +
                       grouped_linear::fp8::round_up(m, grouped_linear::fp8::kGroupAlign));
    l.block.push_back(l.block.back() + blocks_of(m));
  }
  return l;
}

// Half an ulp of the output dtype, relative.
inline double rounding_of(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return std::ldexp(1.0, -11);
    case DType::kBFloat16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}

// dbias against float64 sums. fp32 accumulation of m terms in any order is
// within (m - 1) * 2^-24 * Σ|x| of the exact sum; storing it in the output
// dtype adds half an ulp of the result. Empty groups must be exactly zero.
inline void check_dbias(const ActivationCase& a, const Buf& dbias, const std::string& what) {
  const Layout l = layout_of(a.sizes);
  int64_t wrong = 0;
  std::string first;
  for (int64_t g = 0; g < a.g(); ++g)
    for (int64_t ch = 0; ch < a.c(); ++ch) {
      double sum = 0.0, abs_sum = 0.0;
      for (int64_t r = l.row[g]; r < l.row[g + 1]; ++r) {
        sum += a.input(r, ch);
        abs_sum += std::fabs(a.input(r, ch));
      }
      const double got = get(dbias, a.dbias_dtype, g * a.c() + ch);
      const int64_t m = l.row[g + 1] - l.row[g];
      bool ok;
      if (m == 0) {
        ok = got == 0.0 && !std::signbit(got);
      } else if (!std::isfinite(sum) || !std::isfinite(abs_sum)) {
        ok = std::isnan(sum) ? std::isnan(got) : (std::isnan(abs_sum) ? std::isnan(got) : true);
        if (std::isinf(sum)) ok = got == sum;
      } else {
        const double bound = static_cast<double>(m + 1) * std::ldexp(1.0, -24) * abs_sum +
                             rounding_of(a.dbias_dtype) * std::fabs(sum) + 1e-30;
        ok = std::fabs(got - sum) <= bound;
      }
      if (!ok) {
        if (wrong < 5)
          first += " [g " + std::to_string(g) + ", c " + std::to_string(ch) + "] " +
                   std::to_string(got) + " vs " + std::to_string(sum);
        ++wrong;
      }
    }
  EXPECT_EQ(wrong, 0) << what << ": dbias differs from the float64 sums:" << first;
}

}  // namespace gl_test
