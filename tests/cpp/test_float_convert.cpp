// The scalar float <-> float16 / bfloat16 conversions the CPU engine rounds
// its outputs with. They must be IEEE round-to-nearest-even, bit-exact with
// the GPU's __float2half_rn / __float2bfloat16_rn: checked on hand-picked
// values, exhaustively on every 16-bit pattern, on every tie between two
// adjacent 16-bit values (and its float neighbours), and on random floats
// against an independent nearest-value search.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <vector>

#include "core/cpu/float_convert.h"
#include "test_util.h"

namespace gl_test {
namespace {

using grouped_linear::cpu::bf16_to_float;
using grouped_linear::cpu::bits_to_float;
using grouped_linear::cpu::float_to_bf16;
using grouped_linear::cpu::float_to_bits;
using grouped_linear::cpu::float_to_fp16;
using grouped_linear::cpu::fp16_to_float;

constexpr float kInf = std::numeric_limits<float>::infinity();

// --- an independent model of the two formats --------------------------------

struct Format {
  const char* name;
  int mantissa_bits;  // 10 for float16, 7 for bfloat16
  int exponent_bias;  // 15, 127
  uint16_t inf_bits;  // 0x7c00, 0x7f80
  uint16_t (*from_float)(float);
  float (*to_float)(uint16_t);
};

void PrintTo(const Format& f, std::ostream* os) { *os << f.name; }

const Format kFp16{"float16", 10, 15, 0x7c00, float_to_fp16, fp16_to_float};
const Format kBf16{"bfloat16", 7, 127, 0x7f80, float_to_bf16, bf16_to_float};

// The value of a non-negative bit pattern up to inf_bits, computed from the
// definition; the pattern of infinity stands for the next power of two past
// the largest finite value, which is where IEEE rounding puts it.
double model_value(const Format& f, uint32_t bits) {
  const uint32_t exponent = bits >> f.mantissa_bits;
  const uint32_t mantissa = bits & ((1u << f.mantissa_bits) - 1);
  const int min_exponent = 1 - f.exponent_bias - f.mantissa_bits;  // the unit of subnormals
  if (exponent == 0) return std::ldexp(static_cast<double>(mantissa), min_exponent);
  return std::ldexp(static_cast<double>(mantissa | (1u << f.mantissa_bits)),
                    static_cast<int>(exponent) - 1 + min_exponent);
}

// All values of patterns 0 .. inf_bits, increasing.
std::vector<double> model_table(const Format& f) {
  std::vector<double> table;
  for (uint32_t b = 0; b <= f.inf_bits; ++b) table.push_back(model_value(f, b));
  return table;
}

// Nearest representable pattern to finite `x`, ties to the even pattern,
// found by search in the table: no bit tricks shared with the code under test.
uint16_t model_round(const Format& f, const std::vector<double>& table, float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= table.back()) return sign | f.inf_bits;
  const auto hi = std::upper_bound(table.begin(), table.end(), a);  // table[hi] > a
  const size_t h = static_cast<size_t>(hi - table.begin());
  const size_t l = h - 1;  // table[l] <= a
  const double dl = a - table[l], dh = table[h] - a;
  size_t pick;
  if (dl < dh) {
    pick = l;
  } else if (dh < dl) {
    pick = h;
  } else {
    pick = (l % 2 == 0) ? l : h;
  }
  return sign | static_cast<uint16_t>(pick);
}

bool is_nan16(const Format& f, uint16_t h) { return (h & 0x7fff) > f.inf_bits; }

// --- float16 by hand ---------------------------------------------------------

TEST(Fp16Convert, ExactValues) {
  EXPECT_EQ(float_to_fp16(0.f), 0x0000);
  EXPECT_EQ(float_to_fp16(-0.f), 0x8000);
  EXPECT_EQ(float_to_fp16(1.f), 0x3c00);
  EXPECT_EQ(float_to_fp16(-2.f), 0xc000);
  EXPECT_EQ(float_to_fp16(0.5f), 0x3800);
  EXPECT_EQ(float_to_fp16(65504.f), 0x7bff);  // the largest finite float16
  EXPECT_EQ(fp16_to_float(0x7bff), 65504.f);
  EXPECT_EQ(fp16_to_float(0x3c01), 1.f + 0x1p-10f);
  EXPECT_EQ(fp16_to_float(0xc000), -2.f);
}

TEST(Fp16Convert, RoundToNearestEvenTies) {
  // 1 + 2^-11 lies halfway between 1 (even) and 1 + 2^-10 (odd): to 1.
  EXPECT_EQ(float_to_fp16(1.f + 0x1p-11f), 0x3c00);
  // 1 + 3 * 2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even): up.
  EXPECT_EQ(float_to_fp16(1.f + 3 * 0x1p-11f), 0x3c02);
  // Just off the tie, the nearest wins either way.
  EXPECT_EQ(float_to_fp16(std::nextafter(1.f + 0x1p-11f, 2.f)), 0x3c01);
  EXPECT_EQ(float_to_fp16(std::nextafter(1.f + 3 * 0x1p-11f, 0.f)), 0x3c01);
  EXPECT_EQ(float_to_fp16(-(1.f + 0x1p-11f)), 0xbc00);
  // A tie that carries into the exponent: 2 - 2^-11 is halfway between
  // 0x3bff (odd) and 2.0 (0x4000, even).
  EXPECT_EQ(float_to_fp16(2.f - 0x1p-11f), 0x4000);
}

TEST(Fp16Convert, Subnormals) {
  EXPECT_EQ(float_to_fp16(0x1p-24f), 0x0001);  // the smallest subnormal
  EXPECT_EQ(fp16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(float_to_fp16(0x1p-14f), 0x0400);         // the smallest normal
  EXPECT_EQ(float_to_fp16(1023 * 0x1p-24f), 0x03ff);  // the largest subnormal
  EXPECT_EQ(fp16_to_float(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(fp16_to_float(0x0200), 0x1p-15f);
  EXPECT_EQ(fp16_to_float(0x8001), -0x1p-24f);
  // Ties among subnormals go to even: 0.5, 1.5 and 2.5 units.
  EXPECT_EQ(float_to_fp16(0x1p-25f), 0x0000);
  EXPECT_EQ(float_to_fp16(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(float_to_fp16(5 * 0x1p-25f), 0x0002);
  EXPECT_EQ(float_to_fp16(std::nextafter(0x1p-25f, 1.f)), 0x0001);
  EXPECT_EQ(float_to_fp16(-0x1p-25f), 0x8000);  // keeps the sign of zero
  // Halfway between the largest subnormal (odd) and the smallest normal: up.
  EXPECT_EQ(float_to_fp16(1023.5f * 0x1p-24f), 0x0400);
  // Far below: zero; float subnormals too.
  EXPECT_EQ(float_to_fp16(1e-30f), 0x0000);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(Fp16Convert, Overflow) {
  EXPECT_EQ(float_to_fp16(65504.f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65519.f), 0x7bff);  // below the halfway point 65520
  EXPECT_EQ(float_to_fp16(std::nextafter(65520.f, 0.f)), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.f), 0x7c00);  // the tie rounds to even: infinity
  EXPECT_EQ(float_to_fp16(-65520.f), 0xfc00);
  EXPECT_EQ(float_to_fp16(1e6f), 0x7c00);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(float_to_fp16(kInf), 0x7c00);
  EXPECT_EQ(float_to_fp16(-kInf), 0xfc00);
  EXPECT_EQ(fp16_to_float(0x7c00), kInf);
  EXPECT_EQ(fp16_to_float(0xfc00), -kInf);
}

TEST(Fp16Convert, NanStaysNan) {
  for (uint32_t bits :
       {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu, 0x7fc0deadu, 0xff800001u}) {
    const uint16_t h = float_to_fp16(bits_to_float(bits));
    EXPECT_TRUE(is_nan16(kFp16, h)) << std::hex << bits << " -> " << h;
    EXPECT_EQ(h & 0x8000, (bits >> 16) & 0x8000) << std::hex << bits;
    EXPECT_TRUE(std::isnan(fp16_to_float(h)));
  }
  for (uint16_t h : {0x7c01, 0x7e00, 0x7fff, 0xfe00, 0xfc01})
    EXPECT_TRUE(std::isnan(fp16_to_float(h))) << std::hex << h;
}

// --- bfloat16 by hand --------------------------------------------------------

TEST(Bf16Convert, ExactValuesAndTies) {
  EXPECT_EQ(float_to_bf16(0.f), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.f), 0x8000);
  EXPECT_EQ(float_to_bf16(1.f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.f), 0xc000);
  EXPECT_EQ(bf16_to_float(0x3f81), 1.f + 0x1p-7f);
  // 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7 (odd): to 1.
  EXPECT_EQ(float_to_bf16(1.f + 0x1p-8f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 0x3f81 (odd) and 0x3f82 (even): up.
  EXPECT_EQ(float_to_bf16(1.f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(float_to_bf16(std::nextafter(1.f + 0x1p-8f, 2.f)), 0x3f81);
  EXPECT_EQ(float_to_bf16(-(1.f + 3 * 0x1p-8f)), 0xbf82);
  // A tie that carries into the exponent: 2 - 2^-8 goes to 2.
  EXPECT_EQ(float_to_bf16(2.f - 0x1p-8f), 0x4000);
}

TEST(Bf16Convert, SubnormalsAndOverflow) {
  // bfloat16 subnormals are float subnormals with the low 16 bits dropped.
  EXPECT_EQ(float_to_bf16(bits_to_float(0x00010000u)), 0x0001);
  EXPECT_EQ(bf16_to_float(0x0001), bits_to_float(0x00010000u));
  EXPECT_EQ(float_to_bf16(bits_to_float(0x00008000u)), 0x0000);  // tie: to even 0
  EXPECT_EQ(float_to_bf16(bits_to_float(0x00018000u)), 0x0002);  // tie: to even 2
  EXPECT_EQ(float_to_bf16(bits_to_float(0x00008001u)), 0x0001);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::denorm_min()), 0x8000);
  // The largest finite bfloat16 and what lies past it.
  EXPECT_EQ(float_to_bf16(bits_to_float(0x7f7f0000u)), 0x7f7f);
  EXPECT_EQ(float_to_bf16(bits_to_float(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(float_to_bf16(bits_to_float(0x7f7f8000u)), 0x7f80);  // tie, to even: infinity
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(float_to_bf16(kInf), 0x7f80);
  EXPECT_EQ(float_to_bf16(-kInf), 0xff80);
  EXPECT_EQ(bf16_to_float(0x7f80), kInf);
}

TEST(Bf16Convert, NanStaysNan) {
  // A NaN whose payload sits only in the low 16 bits must not become infinity.
  for (uint32_t bits :
       {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7f80ffffu, 0xff800001u, 0x7fffffffu}) {
    const uint16_t h = float_to_bf16(bits_to_float(bits));
    EXPECT_TRUE(is_nan16(kBf16, h)) << std::hex << bits << " -> " << h;
    EXPECT_EQ(h & 0x8000, (bits >> 16) & 0x8000) << std::hex << bits;
    EXPECT_TRUE(std::isnan(bf16_to_float(h)));
  }
}

// --- exhaustive --------------------------------------------------------------

class ConvertExhaustive : public ::testing::TestWithParam<Format> {};

// Every one of the 65536 patterns decodes to the value the definition gives,
// and goes back to itself (NaNs to a NaN of the same sign: payloads may
// differ).
TEST_P(ConvertExhaustive, EveryPatternDecodesAndRoundTrips) {
  const Format& f = GetParam();
  int64_t wrong_value = 0, wrong_round_trip = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float value = f.to_float(bits);
    const uint16_t back = f.from_float(value);
    const bool negative = (bits & 0x8000) != 0;
    if (is_nan16(f, bits)) {
      if (!std::isnan(value) || std::signbit(value) != negative) ++wrong_value;
      if (!is_nan16(f, back) || (back & 0x8000) != (bits & 0x8000)) ++wrong_round_trip;
      continue;
    }
    const uint16_t magnitude = bits & 0x7fff;
    const double expected =
        magnitude == f.inf_bits ? static_cast<double>(kInf) : model_value(f, magnitude);
    if (static_cast<double>(value) != (negative ? -expected : expected) ||
        std::signbit(value) != negative) {
      if (wrong_value++ < 5)
        ADD_FAILURE() << f.name << " 0x" << std::hex << h << " decodes to " << value;
    }
    if (back != bits) {
      if (wrong_round_trip++ < 5)
        ADD_FAILURE() << f.name << " 0x" << std::hex << h << " -> " << value << " -> 0x" << back;
    }
  }
  EXPECT_EQ(wrong_value, 0);
  EXPECT_EQ(wrong_round_trip, 0);
}

// Every point halfway between two adjacent patterns (and between the largest
// finite value and the next power of two, where infinity starts) is a float;
// it and its two float neighbours round as the model says, in both signs.
TEST_P(ConvertExhaustive, EveryTieAndItsNeighbours) {
  const Format& f = GetParam();
  const std::vector<double> table = model_table(f);
  int64_t wrong = 0;
  for (size_t b = 0; b + 1 < table.size(); ++b) {
    const double mid = 0.5 * (table[b] + table[b + 1]);
    const float tie = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(tie), mid) << "a halfway point is not a float";
    for (float x : {tie, std::nextafter(tie, 0.f), std::nextafter(tie, kInf)})
      for (float s : {x, -x}) {
        const uint16_t expected = model_round(f, table, s);
        const uint16_t got = f.from_float(s);
        if (got != expected && wrong++ < 5)
          ADD_FAILURE() << f.name << ": " << s << " (0x" << std::hex << float_to_bits(s)
                        << ") -> 0x" << got << ", expected 0x" << expected;
      }
  }
  EXPECT_EQ(wrong, 0);
}

// Random floats, over the whole float range and concentrated on the
// format's own range, round as the model says.
TEST_P(ConvertExhaustive, RandomFloatsRoundToNearest) {
  const Format& f = GetParam();
  const std::vector<double> table = model_table(f);
  const uint32_t seed = seed_for(current_test_name());
  SCOPED_TRACE(seed_message(seed));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> any_bits;
  // Exponents from 2 below the smallest subnormal to 2 past the largest finite.
  const int lo_exp = 1 - f.exponent_bias - f.mantissa_bits - 2;
  const int hi_exp = f.exponent_bias + 2;
  std::uniform_int_distribution<int> exponent(std::max(lo_exp, -149), std::min(hi_exp, 127));
  std::uniform_real_distribution<double> significand(1.0, 2.0);
  int64_t wrong = 0;
  for (int i = 0; i < 400000; ++i) {
    float x = bits_to_float(any_bits(rng));
    if (i % 2) x = static_cast<float>(std::ldexp(significand(rng), exponent(rng)));
    if (std::isnan(x) || std::isinf(x)) continue;
    if (i % 4 == 1) x = -x;
    const uint16_t expected = model_round(f, table, x);
    const uint16_t got = f.from_float(x);
    if (got != expected && wrong++ < 5)
      ADD_FAILURE() << f.name << ": " << x << " (0x" << std::hex << float_to_bits(x) << ") -> 0x"
                    << got << ", expected 0x" << expected;
  }
  EXPECT_EQ(wrong, 0);
}

// The blockwise activation cast (quantize_wide_tile_blockwise) takes its
// maxima of |x| on the 16-bit patterns with the sign cleared, then widens
// the maximum: that is the maximum of the widened values' float bits only
// if widening orders the 32767 magnitude patterns as their bits do (NaN
// payloads included, every NaN above infinity).
TEST_P(ConvertExhaustive, MagnitudePatternsOrderAsTheirFloatBits) {
  const Format& f = GetParam();
  auto abs_float_bits = [&](uint16_t h) { return float_to_bits(f.to_float(h)) & 0x7fffffffu; };
  int64_t wrong = 0;
  for (uint32_t h = 1; h <= 0x7fffu; ++h) {
    const uint32_t below = abs_float_bits(static_cast<uint16_t>(h - 1));
    const uint32_t at = abs_float_bits(static_cast<uint16_t>(h));
    if (!(below < at) && wrong++ < 5)
      ADD_FAILURE() << f.name << ": 0x" << std::hex << h << " widens to 0x" << at
                    << ", not above 0x" << (h - 1) << "'s 0x" << below;
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(abs_float_bits(static_cast<uint16_t>(f.inf_bits + 1)), 0x7f800000u) << f.name;
  EXPECT_EQ(abs_float_bits(f.inf_bits), 0x7f800000u) << f.name;
  // The sign bit is the only bit the cast clears.
  for (uint32_t h = 0; h <= 0x7fffu; ++h)
    if (abs_float_bits(static_cast<uint16_t>(h | 0x8000u)) !=
            abs_float_bits(static_cast<uint16_t>(h)) &&
        wrong++ < 5)
      ADD_FAILURE() << f.name << ": 0x" << std::hex << (h | 0x8000u) << " and 0x" << h;
  EXPECT_EQ(wrong, 0);
}

INSTANTIATE_TEST_SUITE_P(Formats, ConvertExhaustive, ::testing::Values(kFp16, kBf16),
                         [](const ::testing::TestParamInfo<Format>& info) {
                           return std::string(info.param.mantissa_bits == 10 ? "Fp16" : "Bf16");
                         });

}  // namespace
}  // namespace gl_test
