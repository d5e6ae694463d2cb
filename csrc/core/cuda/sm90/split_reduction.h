// wgrad with few output tiles: each group's reduction split into pieces.
// A wgrad's grid is out_features x in_features tiles a group, whatever its
// rows, so one group with a small weight (Linear on many rows, a 2048 x 768
// layer: 48 tiles of 128 x 256) leaves most SMs idle for the whole of its
// long reduction. Split into P pieces of rows, the same kernel family
// writes P float32 partial gradients a group as P x G groups, and one pass
// sums them into the gradient (sum_partials.h): P times the CTAs, for a
// pass over P x N x K floats.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cuda/sm90/grouped_gemm_sm90.h"

namespace grouped_linear::cuda::sm90 {

// Rows a piece keeps at least: a piece's tile must still be mostly MMAs.
constexpr int64_t kMinPieceRows = 2048;
constexpr int kMaxPieces = 8;
// Pieces start at multiples of this many rows (FP8's column-wise copies
// need multiples of fp8::kGroupAlign; 128 also keeps whole k-blocks).
constexpr int64_t kPieceAlign = 128;

// How many pieces each group's reduction is split into (1: not split), for
// a wgrad launch on tiles of tile_m x tile_n: host group sizes only, only
// where the groups' output tiles fill at most half the SMs, and never while
// a kernel is forced by name (a split launch runs the float32 kernel, not
// the one forced).
int reduction_pieces(int tile_m, int tile_n, const GroupedLaunch& launch);

// Whether set_kernel_override has forced a kernel (kernel_table.cpp).
bool kernel_forced();

// The sizes of `pieces` pieces of each group, group after group, summing to
// the group's rows: each piece starts at a multiple of kPieceAlign rows into
// its group (a short group's last pieces are empty), so FP8 pieces keep the
// column-wise copies' group starts (multiples of fp8::kGroupAlign).
std::vector<int64_t> piece_sizes(const int64_t* group_sizes, int groups, int pieces);

}  // namespace grouped_linear::cuda::sm90
