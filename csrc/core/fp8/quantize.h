// FP8 quantization on the CPU: the reference every GPU quantize kernel is
// compared with bit for bit, and the emulation CI trains with.
//
//   per-tensor:  q = to_fp8(x * scale), one fp32 scale (delayed or current scaling)
//   blockwise:   one fp32 scale per block of block_rows x block_cols elements
//                (1x128 for activations and gradients, 128x128 for weights)
// Dequantization multiplies by scale_inv = 1 / scale.
#pragma once

#include <cstdint>
#include <vector>

#include "core/fp8/fp8_format.h"

namespace grouped_linear::fp8 {

// max |x| over n values; NaN if any value is NaN (so a bad tensor cannot
// hide behind max()).
float amax(const float* x, int64_t n);

// Scale that maps `amax` to the format's largest value, divided by
// 2^margin. When amax is zero, infinite or NaN the previous scale is kept:
// a bad amax never becomes a scale. power_2 rounds the scale down to a power
// of two (exact rescaling, no mantissa error from the scale itself).
float scale_from_amax(float amax, float fp8_max, int margin, float previous_scale, bool power_2);

// out[i] = to_fp8(x[i] * scale).
void quantize(const float* x, int64_t n, float scale, Format format, uint8_t* out);

// out[i] = from_fp8(q[i]) * scale_inv.
void dequantize(const uint8_t* q, int64_t n, float scale_inv, Format format, float* out);

struct BlockLayout {
  int64_t rows = 0, cols = 0;  // the matrix
  int block_rows = 1, block_cols = 128;
  int64_t row_blocks() const { return (rows + block_rows - 1) / block_rows; }
  int64_t col_blocks() const { return (cols + block_cols - 1) / block_cols; }
};

// Row-major x[rows, cols] -> q (same layout) and scale_inv[row_blocks,
// col_blocks]. A block's scale comes from its own amax (partial blocks at
// the edges included); an all-zero block gets scale 1.
void quantize_blockwise(const float* x, const BlockLayout& layout, Format format, bool power_2,
                        uint8_t* q, float* scale_inv);

void dequantize_blockwise(const uint8_t* q, const float* scale_inv, const BlockLayout& layout,
                          Format format, float* out);

}  // namespace grouped_linear::fp8
