// The two FP8 formats (OCP FP8: E4M3 "fn" without infinities, E5M2 with
// them) and the conversions to and from float. Header-only and usable from
// host and device code, so the CPU emulation and the GPU kernels share one
// definition and give the same bits.
//
// float -> fp8 rounds to nearest, ties to even, and saturates: finite values
// beyond the largest finite fp8 and ±inf become ±max (as CUDA's
// __NV_SATFINITE conversions do); NaN stays NaN (code 0x7F, sign kept).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GL_HOST_DEVICE __host__ __device__
#else
#define GL_HOST_DEVICE
#endif

namespace grouped_linear::fp8 {

enum class Format : uint8_t { kE4M3, kE5M2 };

struct FormatInfo {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  uint8_t max_code;  // largest finite magnitude, sign bit clear
  float max;         // its value
};

GL_HOST_DEVICE constexpr FormatInfo format_info(Format format) {
  return format == Format::kE4M3 ? FormatInfo{4, 3, 7, 0x7E, 448.0f}
                                 : FormatInfo{5, 2, 15, 0x7B, 57344.0f};
}

GL_HOST_DEVICE inline uint32_t float_bits(float x) {
  uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(x);
#else
  std::memcpy(&u, &x, sizeof(u));
#endif
  return u;
}

GL_HOST_DEVICE inline float bits_float(uint32_t u) {
  float x;
#if defined(__CUDA_ARCH__)
  x = __uint_as_float(u);
#else
  std::memcpy(&x, &u, sizeof(x));
#endif
  return x;
}

// float -> fp8 code: round to nearest even, saturating (see above).
GL_HOST_DEVICE inline uint8_t to_fp8(float x, Format format) {
  const FormatInfo f = format_info(format);
  const uint32_t u = float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  const uint32_t exponent = (u >> 23) & 0xFF;
  const uint32_t mantissa = u & 0x7FFFFF;
  if (exponent == 0xFF)
    return mantissa != 0 ? static_cast<uint8_t>(sign | 0x7F)  // NaN
                         : static_cast<uint8_t>(sign | f.max_code);
  if (exponent == 0) return sign;  // float zeros and subnormals are far below fp8's smallest step

  // |x| = significand * 2^(e - 23) with a 24-bit significand.
  const int e = static_cast<int>(exponent) - 127;
  const uint64_t significand = mantissa | 0x800000u;
  const int min_normal_exponent = 1 - f.bias;
  // Bits of the significand to drop: normal results keep mantissa_bits of
  // fraction; below the normal range the step is fixed at 2^(min - mantissa).
  int shift = 23 - f.mantissa_bits;
  if (e < min_normal_exponent) shift += min_normal_exponent - e;
  if (shift > 25) return sign;  // below half of the smallest subnormal
  const uint64_t kept = significand >> shift;
  const uint64_t rest = significand & ((uint64_t{1} << shift) - 1);
  const uint64_t half = uint64_t{1} << (shift - 1);
  const uint64_t rounded = kept + ((rest > half || (rest == half && (kept & 1))) ? 1 : 0);

  uint32_t code;
  if (e < min_normal_exponent) {
    code =
        static_cast<uint32_t>(rounded);  // subnormal; rounding up to 1 << M is the smallest normal
  } else {
    const uint32_t biased = static_cast<uint32_t>(e + f.bias);
    // rounded is in [2^M, 2^(M+1)]; a carry out of the fraction bumps the exponent.
    code = (biased << f.mantissa_bits) +
           static_cast<uint32_t>(rounded - (uint64_t{1} << f.mantissa_bits));
  }
  if (code > f.max_code) code = f.max_code;
  return static_cast<uint8_t>(sign | code);
}

// fp8 code -> float (exact).
GL_HOST_DEVICE inline float from_fp8(uint8_t code, Format format) {
  const FormatInfo f = format_info(format);
  const uint32_t sign = static_cast<uint32_t>(code & 0x80) << 24;
  const uint32_t magnitude = code & 0x7F;
  const uint32_t exponent = magnitude >> f.mantissa_bits;
  const uint32_t fraction = magnitude & ((1u << f.mantissa_bits) - 1);
  const uint32_t all_ones = (1u << f.exponent_bits) - 1;
  if (format == Format::kE4M3 && magnitude == 0x7F) return bits_float(sign | 0x7FC00000u);
  if (format == Format::kE5M2 && exponent == all_ones)
    return bits_float(sign | (fraction == 0 ? 0x7F800000u : 0x7FC00000u));
  if (exponent == 0) {  // subnormal: fraction * 2^(1 - bias - M)
    const float value = static_cast<float>(fraction) *
                        bits_float(static_cast<uint32_t>(127 + 1 - f.bias - f.mantissa_bits) << 23);
    return bits_float(float_bits(value) | sign);
  }
  const uint32_t float_exponent = exponent - static_cast<uint32_t>(f.bias) + 127;
  return bits_float(sign | (float_exponent << 23) | (fraction << (23 - f.mantissa_bits)));
}

}  // namespace grouped_linear::fp8
