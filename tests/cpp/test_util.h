// Helpers shared by the GoogleTest tests of the core: host tensors in any of
// the core's dtypes, seeded random inputs, NaN poisoning of outputs, the
// float64 reference of the three grouped GEMM roles and the checks of an
// engine's outputs against it. The CPU and the CUDA tests build the same
// problems from these and check their outputs with the same functions.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/cpu/float_convert.h"
#include "core/dtype.h"
#include "core/grouped_gemm.h"
#include "core/views.h"

namespace gl_test {

using grouped_linear::DgradProblem;
using grouped_linear::DType;
using grouped_linear::ForwardProblem;
using grouped_linear::GroupedMatrixView;
using grouped_linear::GroupSizes;
using grouped_linear::MatrixView;
using grouped_linear::WgradProblem;

// ---------------------------------------------------------------------------
// Element access by dtype.

inline const char* short_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "f32";
    case DType::kFloat16: return "f16";
    case DType::kBFloat16: return "bf16";
    default: return "other";
  }
}

inline size_t element_bytes(DType dtype) { return grouped_linear::element_size(dtype); }

// The value `value` takes once stored in `dtype` (round to nearest even).
inline float round_to(DType dtype, float value) {
  namespace cpu = grouped_linear::cpu;
  switch (dtype) {
    case DType::kFloat16: return cpu::fp16_to_float(cpu::float_to_fp16(value));
    case DType::kBFloat16: return cpu::bf16_to_float(cpu::float_to_bf16(value));
    default: return value;
  }
}

// NaN bit patterns with a recognisable payload: what an output holds before
// an engine runs. An element that still holds one was never written.
inline uint32_t poison_bits(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 0x7fc0deadu;
    case DType::kFloat16: return 0x7e5au;
    case DType::kBFloat16: return 0x7fdau;
    default: return 0xa5a5a5a5u;
  }
}

// ---------------------------------------------------------------------------
// A host tensor: `groups` row-major matrices [rows, cols], rows `row_stride`
// elements apart and groups `group_stride` elements apart. A plain matrix is
// the one-group case. Elements outside the view (stride padding) are real
// memory, poisoned like everything else, so that an engine reading or
// writing them shows.

class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, int64_t groups, int64_t rows, int64_t cols, int64_t row_pad = 0,
             int64_t group_pad = 0)
      : dtype_(dtype), groups_(groups), rows_(rows), cols_(cols) {
    row_stride_ = cols + row_pad;
    if (row_stride_ == 0) row_stride_ = 1;
    group_stride_ = rows * row_stride_ + group_pad;
    storage_.resize(static_cast<size_t>(groups * group_stride_) * element_bytes(dtype));
    poison();
  }
  static HostTensor matrix(DType dtype, int64_t rows, int64_t cols, int64_t row_pad = 0) {
    return HostTensor(dtype, 1, rows, cols, row_pad, 0);
  }

  DType dtype() const { return dtype_; }
  int64_t groups() const { return groups_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t row_stride() const { return row_stride_; }
  int64_t group_stride() const { return group_stride_; }
  int64_t storage_elements() const { return groups_ * group_stride_; }
  size_t bytes() const { return storage_.size(); }
  // Null for an empty tensor, as frameworks hand out for zero-size tensors.
  void* data() { return storage_.empty() ? nullptr : storage_.data(); }
  const void* data() const { return storage_.empty() ? nullptr : storage_.data(); }

  int64_t index(int64_t g, int64_t r, int64_t c) const {
    return g * group_stride_ + r * row_stride_ + c;
  }
  bool in_view(int64_t storage_index) const {
    if (cols_ == 0 || rows_ == 0) return false;
    const int64_t g = storage_index / group_stride_, rem = storage_index % group_stride_;
    const int64_t r = rem / row_stride_, c = rem % row_stride_;
    return g < groups_ && r < rows_ && c < cols_;
  }

  uint32_t bits_at(int64_t i) const {
    if (dtype_ == DType::kFloat32) {
      uint32_t v;
      std::memcpy(&v, &storage_[i * 4], 4);
      return v;
    }
    uint16_t v;
    std::memcpy(&v, &storage_[i * 2], 2);
    return v;
  }
  void set_bits_at(int64_t i, uint32_t bits) {
    if (dtype_ == DType::kFloat32) {
      std::memcpy(&storage_[i * 4], &bits, 4);
    } else {
      const uint16_t v = static_cast<uint16_t>(bits);
      std::memcpy(&storage_[i * 2], &v, 2);
    }
  }
  float value_at(int64_t i) const {
    namespace cpu = grouped_linear::cpu;
    const uint32_t bits = bits_at(i);
    switch (dtype_) {
      case DType::kFloat16: return cpu::fp16_to_float(static_cast<uint16_t>(bits));
      case DType::kBFloat16: return cpu::bf16_to_float(static_cast<uint16_t>(bits));
      default: return cpu::bits_to_float(bits);
    }
  }
  void set_value_at(int64_t i, float value) {
    namespace cpu = grouped_linear::cpu;
    switch (dtype_) {
      case DType::kFloat16: set_bits_at(i, cpu::float_to_fp16(value)); return;
      case DType::kBFloat16: set_bits_at(i, cpu::float_to_bf16(value)); return;
      default: set_bits_at(i, cpu::float_to_bits(value)); return;
    }
  }

  double at(int64_t g, int64_t r, int64_t c) const { return value_at(index(g, r, c)); }
  double at(int64_t r, int64_t c) const { return at(0, r, c); }

  // Every element, padding included, to this dtype's poison NaN.
  void poison() {
    for (int64_t i = 0; i < storage_elements(); ++i) set_bits_at(i, poison_bits(dtype_));
  }
  bool is_poison(int64_t i) const { return bits_at(i) == poison_bits(dtype_); }

  // The elements of the view to random non-zero values of magnitude in
  // [0.1, 1) with a random sign, already rounded to the dtype (so the
  // reference sees exactly what the engine sees); the padding stays poisoned.
  void fill_random(std::mt19937& rng) {
    std::uniform_real_distribution<float> magnitude(0.1f, 1.0f);
    std::bernoulli_distribution negative(0.5);
    for (int64_t g = 0; g < groups_; ++g)
      for (int64_t r = 0; r < rows_; ++r)
        for (int64_t c = 0; c < cols_; ++c) {
          const float v = magnitude(rng);
          set_value_at(index(g, r, c), negative(rng) ? -v : v);
        }
  }

  // Views over this host memory.
  MatrixView matrix_view() {
    MatrixView v;
    v.data = data();
    v.dtype = dtype_;
    v.rows = rows_;
    v.cols = cols_;
    v.row_stride = row_stride_;
    return v;
  }
  GroupedMatrixView grouped_view() {
    GroupedMatrixView v;
    v.data = data();
    v.dtype = dtype_;
    v.groups = groups_;
    v.rows = rows_;
    v.cols = cols_;
    v.row_stride = row_stride_;
    v.group_stride = group_stride_;
    v.present = true;
    return v;
  }

  // The view's elements packed [groups, rows, cols], in float64.
  std::vector<double> packed() const {
    std::vector<double> out;
    out.reserve(static_cast<size_t>(groups_ * rows_ * cols_));
    for (int64_t g = 0; g < groups_; ++g)
      for (int64_t r = 0; r < rows_; ++r)
        for (int64_t c = 0; c < cols_; ++c) out.push_back(at(g, r, c));
    return out;
  }

 private:
  DType dtype_ = DType::kFloat32;
  int64_t groups_ = 0, rows_ = 0, cols_ = 0, row_stride_ = 1, group_stride_ = 0;
  std::vector<unsigned char> storage_;
};

// ---------------------------------------------------------------------------
// Seeds. Every test derives its seed from its own name and a base seed
// (GL_TEST_SEED in the environment, or a fixed default), so a run is
// reproducible and a failure names the seed that made it.

inline uint64_t base_seed() {
  const char* env = std::getenv("GL_TEST_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 20240611ull;
}

inline uint32_t seed_for(const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ base_seed();
  for (char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return static_cast<uint32_t>(h ^ (h >> 32));
}

inline std::string current_test_name() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info ? std::string(info->test_suite_name()) + "." + info->name() : "unknown";
}

inline std::string seed_message(uint32_t seed) {
  std::ostringstream s;
  s << "seed " << seed << " (GL_TEST_SEED=" << base_seed() << ", test " << current_test_name()
    << ")";
  return s.str();
}

// ---------------------------------------------------------------------------
// Test cases: dtypes x shapes x how the rows split into groups.

struct DTypes {
  DType in;   // inputs (X, W, dY, bias)
  DType out;  // outputs: the inputs' dtype, or float32
};

struct Shape {
  const char* name;
  int64_t t, k, n, g;
  int64_t pad;  // row padding of every matrix (and group padding of W/dW): strided views
};

enum class Split {
  kRandomWithEmpty,  // random sizes, at least one empty group (when G > 1)
  kAllInOne,         // one random group holds every row, the others are empty
};

struct Case {
  DTypes dtypes;
  Shape shape;
  Split split;
};

inline std::string case_name(const Case& c) {
  std::string name = short_name(c.dtypes.in);
  if (c.dtypes.out != c.dtypes.in) name += std::string("_to_") + short_name(c.dtypes.out);
  name += std::string("_") + c.shape.name;
  name += c.split == Split::kAllInOne ? "_AllInOne" : "_RandomWithEmpty";
  return name;
}

// How gtest prints a case (in failure messages): by its name, not its bytes.
inline void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

inline std::string case_param_name(const ::testing::TestParamInfo<Case>& info) {
  return case_name(info.param);
}

inline std::vector<Shape> test_shapes() {
  return {
      {"K37N23", 64, 37, 23, 4, 0},   // K, N not multiples of 8 or 16
      {"Strided", 50, 37, 23, 5, 7},  // row strides larger than cols everywhere
      {"T0", 0, 16, 8, 3, 0},         // no rows at all: every group empty
      {"G1", 33, 20, 12, 1, 0},       // one group
      {"Aligned", 96, 64, 48, 6, 0},  // K, N multiples of 8, contiguous: grouped kernels take it
      {"G300", 200, 8, 6, 300, 1},    // more groups than one kernel launch covers (256)
  };
}

inline std::vector<DTypes> test_dtypes() {
  return {
      {DType::kFloat32, DType::kFloat32},   {DType::kFloat16, DType::kFloat16},
      {DType::kBFloat16, DType::kBFloat16}, {DType::kFloat16, DType::kFloat32},
      {DType::kBFloat16, DType::kFloat32},
  };
}

inline std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const DTypes& d : test_dtypes())
    for (const Shape& s : test_shapes())
      for (Split split : {Split::kRandomWithEmpty, Split::kAllInOne})
        if (!(s.g == 1 && split == Split::kAllInOne))  // the same thing for one group
          cases.push_back({d, s, split});
  return cases;
}

// Group sizes summing to `total` over `groups` groups.
inline std::vector<int64_t> make_splits(std::mt19937& rng, int64_t total, int64_t groups,
                                        Split kind) {
  std::vector<int64_t> sizes(static_cast<size_t>(groups), 0);
  if (groups == 0) return sizes;
  if (kind == Split::kAllInOne || groups == 1) {
    sizes[std::uniform_int_distribution<int64_t>(0, groups - 1)(rng)] = total;
    return sizes;
  }
  // Pick the groups that stay empty (at least one, never all), then cut the
  // rows among the others at random points (which may empty a few more).
  std::vector<int64_t> order(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) order[g] = g;
  std::shuffle(order.begin(), order.end(), rng);
  const int64_t empty = std::uniform_int_distribution<int64_t>(1, groups - 1)(rng);
  std::vector<int64_t> filled(order.begin() + empty, order.end());
  std::sort(filled.begin(), filled.end());
  std::vector<int64_t> cuts;
  std::uniform_int_distribution<int64_t> cut(0, total);
  for (size_t i = 0; i + 1 < filled.size(); ++i) cuts.push_back(cut(rng));
  cuts.push_back(0);
  cuts.push_back(total);
  std::sort(cuts.begin(), cuts.end());
  for (size_t i = 0; i < filled.size(); ++i) sizes[filled[i]] = cuts[i + 1] - cuts[i];
  return sizes;
}

inline std::string sizes_text(const std::vector<int64_t>& sizes) {
  std::ostringstream s;
  s << "group sizes [";
  for (size_t i = 0; i < sizes.size(); ++i) s << (i ? ", " : "") << sizes[i];
  s << "]";
  return s.str();
}

inline std::vector<int64_t> row_offsets(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> offsets(sizes.size() + 1, 0);
  for (size_t g = 0; g < sizes.size(); ++g) offsets[g + 1] = offsets[g] + sizes[g];
  return offsets;
}

inline GroupSizes host_splits(const std::vector<int64_t>& sizes) {
  GroupSizes s;
  s.num_groups = static_cast<int64_t>(sizes.size());
  s.host = sizes.data();
  return s;
}

// ---------------------------------------------------------------------------
// The float64 reference, computed from the same (already rounded) inputs.

inline std::vector<double> reference_forward(const HostTensor& x, const HostTensor& w,
                                             const HostTensor* bias,
                                             const std::vector<int64_t>& sizes) {
  const int64_t n_dim = w.rows(), k_dim = w.cols();
  std::vector<double> y(static_cast<size_t>(x.rows() * n_dim), 0.0);
  const std::vector<int64_t> offsets = row_offsets(sizes);
  for (size_t g = 0; g < sizes.size(); ++g)
    for (int64_t t = offsets[g]; t < offsets[g + 1]; ++t)
      for (int64_t n = 0; n < n_dim; ++n) {
        double acc = bias ? bias->at(g, 0, n) : 0.0;
        for (int64_t k = 0; k < k_dim; ++k) acc += x.at(t, k) * w.at(g, n, k);
        y[t * n_dim + n] = acc;
      }
  return y;
}

inline std::vector<double> reference_dgrad(const HostTensor& dy, const HostTensor& w,
                                           const std::vector<int64_t>& sizes) {
  const int64_t n_dim = w.rows(), k_dim = w.cols();
  std::vector<double> dx(static_cast<size_t>(dy.rows() * k_dim), 0.0);
  const std::vector<int64_t> offsets = row_offsets(sizes);
  for (size_t g = 0; g < sizes.size(); ++g)
    for (int64_t t = offsets[g]; t < offsets[g + 1]; ++t)
      for (int64_t k = 0; k < k_dim; ++k) {
        double acc = 0.0;
        for (int64_t n = 0; n < n_dim; ++n) acc += dy.at(t, n) * w.at(g, n, k);
        dx[t * k_dim + k] = acc;
      }
  return dx;
}

// dW [G, N, K] and db [G, N] (packed), both from scratch.
inline void reference_wgrad(const HostTensor& dy, const HostTensor& x,
                            const std::vector<int64_t>& sizes, std::vector<double>* dw,
                            std::vector<double>* db) {
  const int64_t groups = static_cast<int64_t>(sizes.size());
  const int64_t n_dim = dy.cols(), k_dim = x.cols();
  dw->assign(static_cast<size_t>(groups * n_dim * k_dim), 0.0);
  db->assign(static_cast<size_t>(groups * n_dim), 0.0);
  const std::vector<int64_t> offsets = row_offsets(sizes);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t t = offsets[g]; t < offsets[g + 1]; ++t)
      for (int64_t n = 0; n < n_dim; ++n) {
        const double d = dy.at(t, n);
        (*db)[g * n_dim + n] += d;
        double* row = &(*dw)[(g * n_dim + n) * k_dim];
        for (int64_t k = 0; k < k_dim; ++k) row[k] += d * x.at(t, k);
      }
}

// ---------------------------------------------------------------------------
// Checks of an output against the reference.

// Relative error ||out - ref|| / ||ref|| allowed for an output stored in
// `dtype`. Engines accumulate in float32 and round once into the output:
//  - float32: the error is float32 accumulation over at most a few hundred
//    terms of magnitude < 1, well under 1e-5 of the norm.
//  - float16: rounding the output costs up to half an ulp, 2^-11 ~ 4.9e-4
//    relative per element; 2e-3 leaves room for accumulation order.
//  - bfloat16: half an ulp is 2^-8 ~ 3.9e-3 relative; hence 1e-2.
inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return 2e-3;
    case DType::kBFloat16: return 1e-2;
    default: return 1e-5;
  }
}

// `out`'s view against `ref` (packed): relative error within the dtype's
// tolerance, no NaN left in the view, padding still poisoned.
inline void expect_matches(const HostTensor& out, const std::vector<double>& ref,
                           const char* what) {
  ASSERT_EQ(static_cast<int64_t>(ref.size()), out.groups() * out.rows() * out.cols()) << what;
  double err2 = 0.0, ref2 = 0.0;
  int64_t nans = 0, first_nan = -1;
  size_t i = 0;
  for (int64_t g = 0; g < out.groups(); ++g)
    for (int64_t r = 0; r < out.rows(); ++r)
      for (int64_t c = 0; c < out.cols(); ++c, ++i) {
        const double v = out.at(g, r, c);
        if (std::isnan(v)) {
          if (nans++ == 0) first_nan = static_cast<int64_t>(i);
          continue;
        }
        err2 += (v - ref[i]) * (v - ref[i]);
        ref2 += ref[i] * ref[i];
      }
  EXPECT_EQ(nans, 0) << what << ": " << nans << " elements are NaN (unwritten?), the first at "
                     << "packed index " << first_nan;
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  EXPECT_LE(rel, tolerance(out.dtype()))
      << what << ": relative error " << rel << " against the float64 reference (norm "
      << std::sqrt(ref2) << ") in " << dtype_name(out.dtype());
  int64_t padding_written = 0;
  for (int64_t s = 0; s < out.storage_elements(); ++s)
    if (!out.in_view(s) && !out.is_poison(s)) ++padding_written;
  EXPECT_EQ(padding_written, 0) << what << ": elements outside the view (stride padding) "
                                << "were written";
}

// Every element of group g of `out` (grouped [G, rows, cols]) is exactly
// `expected` (for an empty group's gradient: zero).
inline void expect_group_equals(const HostTensor& out, int64_t g, double expected,
                                const char* what) {
  int64_t wrong = 0;
  double first = 0.0;
  for (int64_t r = 0; r < out.rows(); ++r)
    for (int64_t c = 0; c < out.cols(); ++c) {
      const double v = out.at(g, r, c);
      if (!(v == expected)) {
        if (wrong++ == 0) first = v;
      }
    }
  EXPECT_EQ(wrong, 0) << what << ": group " << g << " (empty) has " << wrong
                      << " elements that are not exactly " << expected << ", e.g. " << first;
}

// Group g of `out` is bit for bit group g of `before`.
inline void expect_group_unchanged(const HostTensor& out, const HostTensor& before, int64_t g,
                                   const char* what) {
  int64_t changed = 0;
  for (int64_t r = 0; r < out.rows(); ++r)
    for (int64_t c = 0; c < out.cols(); ++c)
      if (out.bits_at(out.index(g, r, c)) != before.bits_at(before.index(g, r, c))) ++changed;
  EXPECT_EQ(changed, 0) << what << ": group " << g << " (empty) changed in " << changed
                        << " elements; accumulating nothing must leave it as it was";
}

// Relative difference of two outputs' views (e.g. a CUDA engine's against
// the CPU engine's).
inline double relative_difference(const HostTensor& a, const HostTensor& b) {
  const std::vector<double> pa = a.packed(), pb = b.packed();
  double err2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < pa.size(); ++i) {
    err2 += (pa[i] - pb[i]) * (pa[i] - pb[i]);
    ref2 += pb[i] * pb[i];
  }
  if (std::isnan(err2)) return err2;
  return ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
}

// ---------------------------------------------------------------------------
// Random problems of each role, on the host, with their checks.

struct ForwardData {
  Case c;
  bool has_bias = false;
  std::vector<int64_t> sizes;
  HostTensor x, w, bias, y;  // y starts poisoned

  // Views of the host buffers (the CUDA tests swap in device pointers).
  ForwardProblem problem() {
    ForwardProblem p;
    p.x = x.matrix_view();
    p.w = w.grouped_view();
    if (has_bias) p.bias = bias.grouped_view();
    p.y = y.matrix_view();
    p.splits = host_splits(sizes);
    return p;
  }

  void check(const HostTensor& y_out) const {
    SCOPED_TRACE(sizes_text(sizes));
    expect_matches(y_out, reference_forward(x, w, has_bias ? &bias : nullptr, sizes), "Y");
  }
};

inline ForwardData make_forward(const Case& c, bool with_bias, std::mt19937& rng) {
  const Shape& s = c.shape;
  ForwardData d;
  d.c = c;
  d.has_bias = with_bias;
  d.sizes = make_splits(rng, s.t, s.g, c.split);
  d.x = HostTensor::matrix(c.dtypes.in, s.t, s.k, s.pad);
  d.w = HostTensor(c.dtypes.in, s.g, s.n, s.k, s.pad, 3 * s.pad);
  d.bias = HostTensor(c.dtypes.in, s.g, 1, s.n, 0, s.pad);
  d.y = HostTensor::matrix(c.dtypes.out, s.t, s.n, s.pad);
  d.x.fill_random(rng);
  d.w.fill_random(rng);
  d.bias.fill_random(rng);
  return d;
}

struct DgradData {
  Case c;
  std::vector<int64_t> sizes;
  HostTensor dy, w, dx;  // dx starts poisoned

  DgradProblem problem() {
    DgradProblem p;
    p.dy = dy.matrix_view();
    p.w = w.grouped_view();
    p.dx = dx.matrix_view();
    p.splits = host_splits(sizes);
    return p;
  }

  void check(const HostTensor& dx_out) const {
    SCOPED_TRACE(sizes_text(sizes));
    expect_matches(dx_out, reference_dgrad(dy, w, sizes), "dX");
  }
};

inline DgradData make_dgrad(const Case& c, std::mt19937& rng) {
  const Shape& s = c.shape;
  DgradData d;
  d.c = c;
  d.sizes = make_splits(rng, s.t, s.g, c.split);
  d.dy = HostTensor::matrix(c.dtypes.in, s.t, s.n, s.pad);
  d.w = HostTensor(c.dtypes.in, s.g, s.n, s.k, s.pad, 3 * s.pad);
  d.dx = HostTensor::matrix(c.dtypes.out, s.t, s.k, s.pad);
  d.dy.fill_random(rng);
  d.w.fill_random(rng);
  return d;
}

// Which outputs a wgrad computes.
enum class WgradMode {
  kDw,              // dW written
  kDwAndDbias,      // dW written, db fused
  kDbiasOnly,       // db alone
  kAccumulate,      // dW += into a float32 buffer (main_grad)
  kAccumulateDbias  // dW += into float32, db fused
};

inline const char* wgrad_mode_name(WgradMode m) {
  switch (m) {
    case WgradMode::kDw: return "dW";
    case WgradMode::kDwAndDbias: return "dW+db";
    case WgradMode::kDbiasOnly: return "db only";
    case WgradMode::kAccumulate: return "dW+=";
    case WgradMode::kAccumulateDbias: return "dW+= and db";
  }
  return "?";
}

struct WgradData {
  Case c;
  WgradMode mode = WgradMode::kDw;
  std::vector<int64_t> sizes;
  HostTensor dy, x;
  HostTensor dw, dw_before;  // dw: poisoned, or random float32 when accumulating
  HostTensor db;             // poisoned

  bool has_dw() const { return mode != WgradMode::kDbiasOnly; }
  bool has_db() const {
    return mode == WgradMode::kDwAndDbias || mode == WgradMode::kDbiasOnly ||
           mode == WgradMode::kAccumulateDbias;
  }
  bool accumulate() const {
    return mode == WgradMode::kAccumulate || mode == WgradMode::kAccumulateDbias;
  }

  WgradProblem problem() {
    WgradProblem p;
    p.dy = dy.matrix_view();
    p.x = x.matrix_view();
    if (has_dw()) p.dw = dw.grouped_view();
    p.accumulate = accumulate();
    if (has_db()) p.dbias = db.grouped_view();
    p.splits = host_splits(sizes);
    return p;
  }

  void check(const HostTensor& dw_out, const HostTensor& db_out) const {
    SCOPED_TRACE(sizes_text(sizes));
    SCOPED_TRACE(wgrad_mode_name(mode));
    std::vector<double> ref_dw, ref_db;
    reference_wgrad(dy, x, sizes, &ref_dw, &ref_db);
    if (has_dw()) {
      if (accumulate()) {
        const std::vector<double> prior = dw_before.packed();
        for (size_t i = 0; i < ref_dw.size(); ++i) ref_dw[i] += prior[i];
      }
      expect_matches(dw_out, ref_dw, accumulate() ? "main_grad" : "dW");
      for (size_t g = 0; g < sizes.size(); ++g) {
        if (sizes[g] != 0) continue;
        if (accumulate())
          expect_group_unchanged(dw_out, dw_before, static_cast<int64_t>(g), "main_grad");
        else
          expect_group_equals(dw_out, static_cast<int64_t>(g), 0.0, "dW");
      }
    }
    if (has_db()) {
      expect_matches(db_out, ref_db, "db");
      for (size_t g = 0; g < sizes.size(); ++g)
        if (sizes[g] == 0) expect_group_equals(db_out, static_cast<int64_t>(g), 0.0, "db");
    }
  }
};

inline WgradData make_wgrad(const Case& c, WgradMode mode, std::mt19937& rng) {
  const Shape& s = c.shape;
  WgradData d;
  d.c = c;
  d.mode = mode;
  d.sizes = make_splits(rng, s.t, s.g, c.split);
  d.dy = HostTensor::matrix(c.dtypes.in, s.t, s.n, s.pad);
  d.x = HostTensor::matrix(c.dtypes.in, s.t, s.k, s.pad);
  d.dy.fill_random(rng);
  d.x.fill_random(rng);
  const DType dw_dtype = d.accumulate() ? DType::kFloat32 : c.dtypes.out;
  d.dw = HostTensor(dw_dtype, s.g, s.n, s.k, s.pad, 3 * s.pad);
  if (d.accumulate()) d.dw.fill_random(rng);  // main_grad holds earlier gradients
  d.dw_before = d.dw;
  d.db = HostTensor(c.dtypes.out, s.g, 1, s.n, 0, s.pad);
  return d;
}

}  // namespace gl_test
