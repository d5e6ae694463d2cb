// Quantized operands: FP8 codes plus the scales that dequantize them, and the
// layouts each GEMM role reads. Non-owning, like core/views.h.
//
// FP8 wgmma on Hopper reads both operands K-major, so each role needs its own
// copy of an operand (Transformer Engine's "row-wise" and "column-wise"):
//
//   role    A (K-major)                          B (K-major)
//   fwd     X  row-wise     [T, K]               W  row-wise     [G][N, K]
//   dgrad   dY row-wise     [T, N]               W  column-wise  [G][K, N] (each Wᵀ)
//   wgrad   dY column-wise  [N, padded T]        X  column-wise  [K, padded T]
//
// Column-wise copies of activations put each group's rows into columns that
// start at a multiple of kGroupAlign (zero-filled in between), so every
// group's K-range of the wgrad GEMM starts aligned, as TMA needs, whatever
// the group sizes; the sm90 wgrad reads each group's zero padding as part of
// its K-range (grouped_gemm_sm90.cuh), so the padding must be zeros.
// Scales are always fp32 `scale_inv` (dequantize = code * scale_inv).
#pragma once

#include <cstdint>

#include "core/fp8/fp8_format.h"
#include "core/views.h"

namespace grouped_linear::fp8 {

// Group starts in column-wise copies are multiples of this many columns
// (bytes): at least TMA's 16-byte address alignment, and a divisor of the
// quantizer's 128-row tiles, whose last one in a group is zero-filled up to
// it. 32, not 16: the sm90 FP8 wgrad runs each group's reduction over its
// rows rounded up to this, and with extents of an odd multiple of 16 bytes
// its loads ran slower, x0.72-0.76 at mixtral's skewed routing on an H100
// (benchmarks/reading.md, 2026-12-06). The one place it is set: the
// quantizers (CPU and CUDA), the sm90 wgrad setup, the op's meta shapes and
// the tests (through _C.fp8.GROUP_ALIGN) read it from here.
constexpr int64_t kGroupAlign = 32;
static_assert(kGroupAlign >= 16 && 128 % kGroupAlign == 0,
              "group starts: 16-byte aligned, dividing a 128-row tile");

inline int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Columns to allocate for the column-wise copy of T grouped rows in G groups:
// enough for any split (each group wastes < kGroupAlign), a multiple of
// kGroupAlign so the row stride stays aligned. Needs no group sizes, so a
// device m_splits costs no sync.
inline int64_t padded_columns(int64_t total_rows, int64_t num_groups) {
  return round_up(total_rows + (kGroupAlign - 1) * num_groups, kGroupAlign);
}

// How scale_inv maps onto the codes.
//   kPerTensor  one scale for the whole matrix (grouped weights: one per group)
//   kBlock      one scale per block_rows x block_cols block: grouped weights
//               row-major over blocks ([G][row_blocks, col_blocks]),
//               activations block-major (see QuantizedActivation)
enum class ScaleLayout : uint8_t { kPerTensor, kBlock };

struct ScaleView {
  float* scale_inv = nullptr;  // on the codes' device
  ScaleLayout layout = ScaleLayout::kPerTensor;
  int block_rows = 0, block_cols = 0;  // kBlock only
};

// Activations X or dY, [T, C]: a row-wise copy [T, C] and/or a column-wise
// copy [C, padded_columns(T, G)]. In the column-wise copy group g occupies
// columns [offset_g, offset_g + m_g), offset_g = Σ_{j<g} round_up(m_j, kGroupAlign).
//
// Blockwise scales (1 x 128 blocks along the reduction dimension of the role
// that reads the copy), block-major: the scales of one 128-deep block of all
// rows of the copy are adjacent, as the GEMMs load them (a tile's 128 row
// scales of a k block in a few sectors; cuBLAS's and DeepGEMM's 1 x 128
// scales are laid out the same way, M-major):
//   row-wise      scale_inv [ceil(C / 128), T]: row r's block b at b * T + r
//   column-wise   blocks of 128 columns restart at each group's first
//                 column (a block never spans two groups): scale_inv
//                 [Σ_g ceil(m_g / 128), C] with group g's blocks starting at
//                 block Σ_{j<g} ceil(m_j / 128): channel c's block b at
//                 b * C + c. Allocate column_block_capacity(T, G) x C floats.
struct QuantizedActivation {
  Format format = Format::kE4M3;
  MatrixView rowwise;  // codes (dtype kFloat8E4M3/kFloat8E5M2); rowwise.data null when absent
  ScaleView rowwise_scale;
  MatrixView columnwise;  // codes [C, padded]; columnwise.data null when absent
  ScaleView columnwise_scale;
};

inline int64_t column_block_capacity(int64_t total_rows, int64_t num_groups, int block = 128) {
  return (total_rows + block - 1) / block +
         num_groups;  // each group adds at most one partial block
}

// Grouped weights W [G, N, K]: row-wise [G][N, K] for fwd, column-wise
// [G][K, N] (each group transposed) for dgrad. Per-tensor: one scale per
// group ([G]); blockwise: 128 x 128 blocks, [G][ceil(N/128), ceil(K/128)]
// row-wise and [G][ceil(K/128), ceil(N/128)] column-wise (a 128 x 128 block
// has the same amax either way, so the column-wise copy is the exact
// transpose of the row-wise one, codes and scales).
struct QuantizedWeight {
  Format format = Format::kE4M3;
  GroupedMatrixView rowwise;
  ScaleView rowwise_scale;
  GroupedMatrixView columnwise;
  ScaleView columnwise_scale;
};

inline DType code_dtype(Format format) {
  return format == Format::kE4M3 ? DType::kFloat8E4M3 : DType::kFloat8E5M2;
}

}  // namespace grouped_linear::fp8
