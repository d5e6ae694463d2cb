// Device helpers of the FP8 kernels that must round exactly as the CPU
// implementation does: input widening (core/cpu/float_convert.h's rules, NaN
// signs and payloads kept), output narrowing, and float products whose NaN
// results are the ones the host's SSE arithmetic produces (the GPU would
// give its canonical NaN, whose sign bit differs and so would the fp8 code).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/fp8/fp8_format.h"
#include "core/fp8/scaling_rules.h"

namespace grouped_linear::fp8::cuda_impl {

// Input dtypes as template arguments.
enum InKind : int { kInF32 = 0, kInF16 = 1, kInBF16 = 2 };

template <int K>
struct Storage {
  using type = uint16_t;
};
template <>
struct Storage<kInF32> {
  using type = float;
};

__device__ __forceinline__ float fp16_bits_to_float(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    const int shift = __clz(mantissa) - 21;  // moves the top set bit to bit 10
    mantissa = (mantissa << shift) & 0x3ffu;
    return bits_float(sign | static_cast<uint32_t>(113 - shift) << 23 | (mantissa << 13));
  }
  return bits_float(sign | (exponent + 112) << 23 | (mantissa << 13));
}

template <int K>
__device__ __forceinline__ float widen(typename Storage<K>::type v) {
  if constexpr (K == kInF32) {
    return v;
  } else if constexpr (K == kInF16) {
    return fp16_bits_to_float(v);
  } else {
    return bits_float(static_cast<uint32_t>(v) << 16);
  }
}

__device__ __forceinline__ uint16_t float_to_bf16_bits(float value) {
  const uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ uint16_t float_to_fp16_bits(float value) {
  const uint32_t bits = float_bits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;
  if (abs_bits < 0x38800000u) {
    if (abs_bits < 0x33000000u) return sign;
    const uint32_t exponent = abs_bits >> 23;
    const uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;
    const uint32_t half_ulp = 1u << (shift - 1);
    uint32_t result = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    if (remainder > half_ulp || (remainder == half_ulp && (result & 1u))) ++result;
    return sign | static_cast<uint16_t>(result);
  }
  uint32_t result = abs_bits - 0x38000000u;
  const uint32_t remainder = result & 0x1fffu;
  result >>= 13;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u))) ++result;
  return sign | static_cast<uint16_t>(result);
}

// to_fp8 (fp8_format.h) with the hardware conversion where there is one
// (sm_89 on: round to nearest even, finite saturation, as to_fp8 does); a
// NaN keeps its sign, as in to_fp8. Checked against to_fp8 for every float
// bit pattern by the CUDA tests (fp8_conversion_mismatches).
__device__ __forceinline__ uint8_t device_to_fp8(float x, Format format) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if (is_nan(x)) return static_cast<uint8_t>(((float_bits(x) >> 24) & 0x80u) | 0x7Fu);
  unsigned short pair;
  if (format == Format::kE4M3)
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %1;" : "=h"(pair) : "f"(x));
  else
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %1;" : "=h"(pair) : "f"(x));
  return static_cast<uint8_t>(pair & 0xFFu);
#else
  return to_fp8(x, format);
#endif
}

// Two values that are not NaN to FP8 in one conversion: byte 0 from `lo`,
// byte 1 from `hi`, each what device_to_fp8 gives (its NaN case never
// arises). Checked with device_to_fp8 by fp8_conversion_mismatches.
__device__ __forceinline__ uint32_t device_to_fp8x2(float lo, float hi, Format format) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short pair;  // cvt puts its first source in the upper byte
  if (format == Format::kE4M3)
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));
  return pair;
#else
  return static_cast<uint32_t>(to_fp8(lo, format)) | static_cast<uint32_t>(to_fp8(hi, format)) << 8;
#endif
}

// Whether x * scale needs none of host_mul's NaN cases for every x whose
// |x| bits are at most `abs_bits_max`: no x is NaN (bits above infinity's),
// and the scale is positive and finite, so no product is NaN either
// (inf * 0 cannot occur). Then host_mul(x, scale) is __fmul_rn(x, scale).
__device__ __forceinline__ bool plain_products(uint32_t abs_bits_max, float scale) {
  return abs_bits_max <= 0x7F800000u && scale > 0.f && float_bits(scale) < 0x7F800000u;
}

// The NaN an invalid operation (inf * 0) gives on the host.
__device__ __forceinline__ float host_default_nan() {
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
  return bits_float(0xFFC00000u);  // x86 "real indefinite"
#else
  return bits_float(0x7FC00000u);
#endif
}

__device__ __forceinline__ float quieted(float x) {
  return bits_float(float_bits(x) | 0x00400000u);
}

// a * b with the host's NaN result: a NaN operand comes back quieted (the
// first one if both are), an invalid product gives the host's default NaN.
__device__ __forceinline__ float host_mul(float a, float b) {
  if (is_nan(a)) return quieted(a);
  if (is_nan(b)) return quieted(b);
  const float p = __fmul_rn(a, b);
  return is_nan(p) ? host_default_nan() : p;
}

// 1 / x as the host computes it (IEEE division, a NaN operand kept).
__device__ __forceinline__ float host_recip(float x) {
  return is_nan(x) ? quieted(x) : __fdiv_rn(1.f, x);
}

// The scale for `amax` with IEEE divisions (never the fast approximate ones).
__device__ __forceinline__ float device_scale_from_amax(float amax, float fp8_max, int margin,
                                                        float previous, bool power_2) {
  if (!(amax > 0.f) || !is_finite(amax)) return previous;
  float scale = __fdiv_rn(__fdiv_rn(fp8_max, amax), exact_pow2(margin));
  if (!is_finite(scale)) scale = bits_float(0x7F7FFFFFu);
  if (power_2) scale = round_down_pow2(scale);
  return scale;
}

// amax tracking on bits: |x|'s bit pattern orders like |x| for every float,
// with NaN above infinity, so a maximum of abs_bits (two integer operations
// an element) is the maximum |x|, or shows that a NaN was met. The value it
// stands for is quantize.h's amax(): the largest |x|, NaN if any was NaN.
__device__ __forceinline__ uint32_t abs_bits(float x) { return float_bits(x) & 0x7FFFFFFFu; }

__device__ __forceinline__ float amax_from_abs_bits(uint32_t m) {
  return m > 0x7F800000u ? canonical_nan() : bits_float(m);
}

__device__ __forceinline__ uint32_t warp_max_bits(uint32_t m) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_max_sync(0xffffffffu, m);
#else
  for (int offset = 16; offset > 0; offset /= 2)
    m = max(m, __shfl_xor_sync(0xffffffffu, m, offset));
  return m;
#endif
}

__device__ __forceinline__ float warp_merge_amax(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = merge_amax(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// merge_amax into *address, atomically (max is order-free, NaN sticks).
__device__ __forceinline__ void atomic_merge_amax(float* address, float value) {
  unsigned int* word = reinterpret_cast<unsigned int*>(address);
  unsigned int old = *reinterpret_cast<volatile unsigned int*>(word);
  while (true) {
    const unsigned int desired = float_bits(merge_amax(bits_float(old), value));
    if (desired == old) return;
    const unsigned int seen = atomicCAS(word, old, desired);
    if (seen == old) return;
    old = seen;
  }
}

}  // namespace grouped_linear::fp8::cuda_impl
