#include "core/fp8/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace grouped_linear::fp8 {

float amax(const float* x, int64_t n) {
  float result = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return std::numeric_limits<float>::quiet_NaN();
    result = std::max(result, std::fabs(x[i]));
  }
  return result;
}

float scale_from_amax(float amax, float fp8_max, int margin, float previous_scale, bool power_2) {
  if (!(amax > 0.f) || !std::isfinite(amax)) return previous_scale;
  float scale = fp8_max / amax / std::ldexp(1.f, margin);
  if (!std::isfinite(scale)) scale = std::numeric_limits<float>::max();  // tiny amax
  if (power_2) {
    int exponent = 0;
    std::frexp(scale, &exponent);  // scale = f * 2^exponent, f in [0.5, 1)
    scale = std::ldexp(1.f, exponent - 1);
  }
  return scale;
}

void quantize(const float* x, int64_t n, float scale, Format format, uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_fp8(x[i] * scale, format);
}

void dequantize(const uint8_t* q, int64_t n, float scale_inv, Format format, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = from_fp8(q[i], format) * scale_inv;
}

namespace {

template <typename Fn>
void for_each_block(const BlockLayout& l, Fn fn) {
  GL_CHECK_VALUE(l.block_rows > 0 && l.block_cols > 0, "block shape: got ", l.block_rows, "x",
                 l.block_cols, ", expected positive sizes");
  for (int64_t rb = 0; rb < l.row_blocks(); ++rb)
    for (int64_t cb = 0; cb < l.col_blocks(); ++cb) {
      const int64_t r0 = rb * l.block_rows, r1 = std::min(l.rows, r0 + l.block_rows);
      const int64_t c0 = cb * l.block_cols, c1 = std::min(l.cols, c0 + l.block_cols);
      fn(rb * l.col_blocks() + cb, r0, r1, c0, c1);
    }
}

}  // namespace

void quantize_blockwise(const float* x, const BlockLayout& l, Format format, bool power_2,
                        uint8_t* q, float* scale_inv) {
  const float fp8_max = format_info(format).max;
  for_each_block(l, [&](int64_t block, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    float block_amax = 0.f;
    for (int64_t r = r0; r < r1; ++r)
      block_amax = std::max(block_amax, amax(x + r * l.cols + c0, c1 - c0));
    // NaN or inf in a block: its scale stays 1 and the values carry the NaN.
    const float scale = scale_from_amax(block_amax, fp8_max, 0, 1.f, power_2);
    scale_inv[block] = 1.f / scale;
    for (int64_t r = r0; r < r1; ++r)
      quantize(x + r * l.cols + c0, c1 - c0, scale, format, q + r * l.cols + c0);
  });
}

void dequantize_blockwise(const uint8_t* q, const float* scale_inv, const BlockLayout& l,
                          Format format, float* out) {
  for_each_block(l, [&](int64_t block, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    for (int64_t r = r0; r < r1; ++r)
      dequantize(q + r * l.cols + c0, c1 - c0, scale_inv[block], format, out + r * l.cols + c0);
  });
}

}  // namespace grouped_linear::fp8
