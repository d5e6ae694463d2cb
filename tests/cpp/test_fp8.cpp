// FP8 formats and CPU quantization: every code decoded, rounding ties,
// saturation, NaN, scales, blockwise layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/fp8/autocast_state.h"
#include "core/fp8/delayed_scaling.h"
#include "core/fp8/fp8_format.h"
#include "core/fp8/quantize.h"

namespace grouped_linear::fp8 {
namespace {

constexpr Format kFormats[] = {Format::kE4M3, Format::kE5M2};

// Every finite code decodes to a value that encodes back to the same code.
TEST(Fp8Format, EveryFiniteCodeRoundTrips) {
  for (Format f : kFormats) {
    int finite = 0;
    for (int code = 0; code < 256; ++code) {
      const float v = from_fp8(static_cast<uint8_t>(code), f);
      if (!std::isfinite(v)) continue;
      ++finite;
      EXPECT_EQ(to_fp8(v, f), code) << "code " << code;
    }
    EXPECT_EQ(finite, f == Format::kE4M3 ? 254 : 248);  // E4M3: 2 NaNs; E5M2: 2 inf + 6 NaN
  }
}

TEST(Fp8Format, KnownValues) {
  EXPECT_EQ(from_fp8(0x7E, Format::kE4M3), 448.f);
  EXPECT_EQ(from_fp8(0x01, Format::kE4M3), std::ldexp(1.f, -9));  // smallest subnormal
  EXPECT_EQ(from_fp8(0x08, Format::kE4M3), std::ldexp(1.f, -6));  // smallest normal
  EXPECT_EQ(from_fp8(0x7B, Format::kE5M2), 57344.f);
  EXPECT_EQ(from_fp8(0x01, Format::kE5M2), std::ldexp(1.f, -16));
  EXPECT_TRUE(std::isinf(from_fp8(0x7C, Format::kE5M2)));
  EXPECT_TRUE(std::isnan(from_fp8(0x7F, Format::kE4M3)));
  EXPECT_EQ(to_fp8(1.f, Format::kE4M3), 0x38);
  EXPECT_EQ(to_fp8(-2.f, Format::kE5M2), 0xC0);
}

// Halfway between two neighbours rounds to the even code.
TEST(Fp8Format, TiesRoundToEven) {
  for (Format f : kFormats) {
    for (int code = 0; code < 0x7E; ++code) {
      const float lo = from_fp8(static_cast<uint8_t>(code), f);
      const float hi = from_fp8(static_cast<uint8_t>(code + 1), f);
      if (!std::isfinite(hi) || code + 1 > format_info(f).max_code) break;
      const float mid = 0.5f * (lo + hi);  // exact in float
      EXPECT_EQ(to_fp8(mid, f), (code % 2 == 0) ? code : code + 1) << "between codes " << code;
      EXPECT_EQ(to_fp8(std::nextafter(mid, hi), f), code + 1);
      EXPECT_EQ(to_fp8(std::nextafter(mid, lo), f), code);
    }
  }
}

TEST(Fp8Format, SaturatesAndKeepsNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  for (Format f : kFormats) {
    const uint8_t max_code = format_info(f).max_code;
    EXPECT_EQ(to_fp8(1e30f, f), max_code);
    EXPECT_EQ(to_fp8(-1e30f, f), 0x80 | max_code);
    EXPECT_EQ(to_fp8(inf, f), max_code);
    EXPECT_EQ(to_fp8(-inf, f), 0x80 | max_code);
    EXPECT_TRUE(std::isnan(from_fp8(to_fp8(std::nanf(""), f), f)));
    EXPECT_EQ(to_fp8(1e-30f, f), 0x00);
    EXPECT_EQ(to_fp8(-0.f, f), 0x80);
  }
  // Just above max rounds back to max rather than saturating early or late.
  EXPECT_EQ(to_fp8(460.f, Format::kE4M3), 0x7E);
}

// Against a float64 reference of round-to-nearest-even on random values.
TEST(Fp8Format, RandomValuesRoundToNearest) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(-12.f, 9.f);
  for (Format f : kFormats) {
    for (int i = 0; i < 20000; ++i) {
      const float x = std::ldexp(1.f, 0) * std::exp2(mag(rng)) * (i % 2 ? -1.f : 1.f);
      const float got = from_fp8(to_fp8(x, f), f);
      // The nearest representable value by search over all codes.
      double best = 0;
      double best_err = std::numeric_limits<double>::infinity();
      for (int code = 0; code < 256; ++code) {
        const double v = from_fp8(static_cast<uint8_t>(code), f);
        if (!std::isfinite(v)) continue;
        const double err = std::fabs(v - static_cast<double>(x));
        if (err < best_err) best_err = err, best = v;
      }
      if (std::fabs(x) <= format_info(f).max) {
        EXPECT_EQ(std::fabs(got - best), 0.0) << "x=" << x;
      }
    }
  }
}

TEST(Fp8Scale, FromAmax) {
  EXPECT_EQ(scale_from_amax(2.f, 448.f, 0, 1.f, false), 224.f);
  EXPECT_EQ(scale_from_amax(2.f, 448.f, 1, 1.f, false), 112.f);
  EXPECT_EQ(scale_from_amax(2.f, 448.f, 0, 1.f, true), 128.f);  // 224 rounded down
  // A bad amax keeps the previous scale.
  EXPECT_EQ(scale_from_amax(0.f, 448.f, 0, 3.f, false), 3.f);
  EXPECT_EQ(scale_from_amax(std::numeric_limits<float>::infinity(), 448.f, 0, 3.f, false), 3.f);
  EXPECT_EQ(scale_from_amax(std::nanf(""), 448.f, 0, 3.f, false), 3.f);
  EXPECT_TRUE(std::isfinite(scale_from_amax(1e-45f, 448.f, 0, 1.f, false)));
  EXPECT_TRUE(std::isnan(amax(std::vector<float>{1.f, std::nanf(""), 2.f}.data(), 3)));
}

// Blockwise: each block's largest magnitude maps to the format's max (within
// the power-of-two rounding) and dequantization is within half a step.
TEST(Fp8Blockwise, ScalesPerBlockAndRoundTrips) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (int block_rows : {1, 128}) {
    BlockLayout l;
    l.rows = 130, l.cols = 300, l.block_rows = block_rows, l.block_cols = 128;
    std::vector<float> x(l.rows * l.cols);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = normal(rng) * std::exp2(static_cast<float>((i / 128) % 9) - 4.f);
    std::vector<uint8_t> q(x.size());
    std::vector<float> scale_inv(l.row_blocks() * l.col_blocks()), back(x.size());
    quantize_blockwise(x.data(), l, Format::kE4M3, true, q.data(), scale_inv.data());
    dequantize_blockwise(q.data(), scale_inv.data(), l, Format::kE4M3, back.data());
    for (float s : scale_inv) {
      int e = 0;
      EXPECT_EQ(std::frexp(s, &e), 0.5f) << "scale_inv " << s << " is not a power of two";
    }
    for (int64_t r = 0; r < l.rows; ++r) {
      for (int64_t c = 0; c < l.cols; ++c) {
        const size_t i = static_cast<size_t>(r * l.cols + c);
        const float block_scale_inv = scale_inv[(r / block_rows) * l.col_blocks() + c / 128];
        // E4M3 keeps 3 fraction bits: relative error <= 2^-4 for normal
        // results; below 2^-6 (scaled) the step is fixed at 2^-9.
        const float bound = std::max(std::fabs(x[i]) * 0.0625f, std::ldexp(block_scale_inv, -10));
        EXPECT_LE(std::fabs(back[i] - x[i]), bound) << "row " << r << " col " << c;
      }
    }
  }
}

TEST(Fp8DelayedScaling, ScalesFromHistoryThenRolls) {
  // history [3, 2], row 0 = this step.
  std::vector<float> history = {1.f, 8.f,   // step t
                                4.f, 2.f,   // t-1
                                2.f, 0.f};  // t-2
  std::vector<float> scale = {1.f, 1.f}, scale_inv(2);
  DelayedScalingGroup g{history.data(), scale.data(), scale_inv.data(), 3, 2};
  update_delayed_scaling(g, 448.f, 0, AmaxAlgo::kMax, false);
  EXPECT_EQ(scale[0], 448.f / 4.f);
  EXPECT_EQ(scale[1], 448.f / 8.f);
  EXPECT_EQ(scale_inv[0], 4.f / 448.f);
  EXPECT_EQ(history, (std::vector<float>{0.f, 0.f, 1.f, 8.f, 4.f, 2.f}));
  update_delayed_scaling(g, 448.f, 1, AmaxAlgo::kMostRecent, false);  // row 0 is zero now
  EXPECT_EQ(scale[0], 448.f / 4.f) << "a zero amax keeps the previous scale";
  history[0] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(update_delayed_scaling(g, 448.f, 0, AmaxAlgo::kMax, true), std::exception);
  EXPECT_EQ(scale[0], 448.f / 4.f) << "check mode updates nothing";
}

TEST(Fp8Autocast, NestsPerThread) {
  EXPECT_FALSE(current().enabled);
  AutocastState on;
  on.enabled = true;
  on.recipe.kind = RecipeKind::kCurrent;
  push(on);
  AutocastState off;
  push(off);
  EXPECT_FALSE(current().enabled);
  pop();
  EXPECT_TRUE(current().enabled);
  EXPECT_EQ(current().recipe.kind, RecipeKind::kCurrent);
  pop();
  EXPECT_EQ(depth(), 0u);
  EXPECT_THROW(pop(), std::exception);
}

}  // namespace
}  // namespace grouped_linear::fp8
