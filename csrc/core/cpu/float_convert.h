// Scalar conversions between float and the 16-bit float formats, bit-exact
// with the GPU's round-to-nearest-even conversions, so the CPU reference and
// the CUDA engines round outputs identically.
#pragma once

#include <cstdint>
#include <cstring>

namespace grouped_linear::cpu {

inline float bits_to_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline uint32_t float_to_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float bf16_to_float(uint16_t bits) {
  return bits_to_float(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t float_to_bf16(float value) {
  uint32_t bits = float_to_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));  // inf, nan
  if (exponent == 0) {
    if (mantissa == 0) return bits_to_float(sign);
    // Subnormal: normalise.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    return bits_to_float(sign | static_cast<uint32_t>(113 - shift) << 23 | (mantissa << 13));
  }
  return bits_to_float(sign | (exponent + 112) << 23 | (mantissa << 13));
}

inline uint16_t float_to_fp16(float value) {
  const uint32_t bits = float_to_bits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;  // rounds to inf (>= 65520)
  if (abs_bits < 0x38800000u) {
    // Result is subnormal or zero: value / 2^-24 rounded to nearest even.
    if (abs_bits < 0x33000000u) return sign;  // < 2^-25 rounds to zero
    const uint32_t exponent = abs_bits >> 23;
    const uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // value = mantissa * 2^(exponent - 150)
    const uint32_t half_ulp = 1u << (shift - 1);
    uint32_t result = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    if (remainder > half_ulp || (remainder == half_ulp && (result & 1u))) ++result;
    return sign | static_cast<uint16_t>(result);
  }
  // Normal: rebias exponent, round mantissa from 23 to 10 bits.
  uint32_t result = abs_bits - 0x38000000u;  // exponent - 112
  const uint32_t remainder = result & 0x1fffu;
  result >>= 13;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u))) ++result;
  return sign | static_cast<uint16_t>(result);
}

}  // namespace grouped_linear::cpu
