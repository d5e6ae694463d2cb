// Tile arithmetic the host rules share (tile_order.cpp, split_reduction.cpp).
#pragma once

#include <cstdint>

namespace grouped_linear::cuda::sm90 {

// Tiles of `tile` covering `extent`; none for a tile of no size.
inline int64_t tiles(int64_t extent, int tile) { return tile > 0 ? (extent + tile - 1) / tile : 0; }

}  // namespace grouped_linear::cuda::sm90
