// How amaxes combine and become scales, written once for the CPU and the GPU
// so both give the same bits. quantize.cpp is the reference these mirror;
// scale_from_amax_exact is checked against its scale_from_amax on the host
// (test_fp8_ops.cpp), and the CUDA kernels use it instead of libm's ldexp
// and frexp, so no device math library result enters a scale.
#pragma once

#include <cstdint>

#include "core/fp8/fp8_format.h"

namespace grouped_linear::fp8 {

// The NaN amax() returns (std::numeric_limits<float>::quiet_NaN()).
GL_HOST_DEVICE inline float canonical_nan() { return bits_float(0x7FC00000u); }

GL_HOST_DEVICE inline bool is_nan(float x) { return (float_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }

GL_HOST_DEVICE inline bool is_finite(float x) {
  return (float_bits(x) & 0x7F800000u) != 0x7F800000u;
}

// Two amaxes of the same tensor (or a recorded amax and a new one): the
// larger, and NaN when either is NaN, so a bad value is never hidden.
GL_HOST_DEVICE inline float merge_amax(float a, float b) {
  if (is_nan(a) || is_nan(b)) return canonical_nan();
  return a < b ? b : a;  // std::max
}

// A block's amax over its rows' segments as quantize_blockwise folds them
// (std::max(block, segment)): a segment whose amax is NaN drops out.
GL_HOST_DEVICE inline float fold_block_amax(float block, float segment) {
  return block < segment ? segment : block;
}

// std::ldexp(1.f, e), exactly: a power of two, subnormal, zero or infinity.
GL_HOST_DEVICE inline float exact_pow2(int e) {
  if (e > 127) return bits_float(0x7F800000u);
  if (e >= -126) return bits_float(static_cast<uint32_t>(e + 127) << 23);
  if (e >= -149) return bits_float(1u << (e + 149));
  return 0.f;
}

// For finite x >= 0: what `frexp(x, &e); ldexp(1.f, e - 1)` gives, i.e. the
// largest power of two <= x (and 0.5 for x = 0, as frexp(0) gives e = 0).
GL_HOST_DEVICE inline float round_down_pow2(float x) {
  const uint32_t bits = float_bits(x);
  if (bits == 0) return 0.5f;
  if ((bits & 0x7F800000u) != 0) return bits_float(bits & 0xFF800000u);  // normal
  uint32_t top = 1u << 22;  // subnormal: keep the highest set bit
  while ((bits & top) == 0) top >>= 1;
  return bits_float(top);
}

// scale_from_amax of quantize.h with the same divisions, in exact terms.
GL_HOST_DEVICE inline float scale_from_amax_exact(float amax, float fp8_max, int margin,
                                                  float previous_scale, bool power_2) {
  if (!(amax > 0.f) || !is_finite(amax)) return previous_scale;
  float scale = fp8_max / amax / exact_pow2(margin);
  if (!is_finite(scale)) scale = bits_float(0x7F7FFFFFu);  // FLT_MAX: tiny amax
  if (power_2) scale = round_down_pow2(scale);
  return scale;
}

// Group g's rows from its size and the sizes before it, clamped as the CUDA
// kernels read device sizes: negative sizes count as 0, rows past T are
// dropped. `before` is the clamped start; returns the clamped count.
GL_HOST_DEVICE inline int64_t clamped_group_rows(int64_t size, int64_t before, int64_t total_rows) {
  if (size < 0) size = 0;
  const int64_t left = total_rows - before;
  return size < left ? size : left;
}

}  // namespace grouped_linear::fp8
