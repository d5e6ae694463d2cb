#include "core/cuda/sm90/split_reduction.h"

#include <algorithm>

#include "core/cuda/sm90/tile_count.h"

namespace grouped_linear::cuda::sm90 {

int reduction_pieces(int tile_m, int tile_n, const GroupedLaunch& launch) {
  if (launch.role != Role::kWgrad || launch.host_sizes == nullptr || launch.num_groups <= 0 ||
      kernel_forced())
    return 1;
  // wgrad's tile grid: out_features (n) x in_features (k) a group.
  const int64_t grid = launch.num_groups * tiles(launch.n, tile_m) * tiles(launch.k, tile_n);
  if (grid <= 0 || grid * 2 > launch.sm_count) return 1;
  const int64_t average = launch.total_rows / launch.num_groups;
  const int64_t pieces =
      std::min<int64_t>({launch.sm_count / grid, average / kMinPieceRows, kMaxPieces,
                         static_cast<int64_t>(kMaxHostGroups / launch.num_groups)});
  return pieces >= 2 ? static_cast<int>(pieces) : 1;
}

std::vector<int64_t> piece_sizes(const int64_t* group_sizes, int groups, int pieces) {
  std::vector<int64_t> sizes;
  sizes.reserve(static_cast<size_t>(groups) * pieces);
  for (int g = 0; g < groups; ++g) {
    const int64_t rows = group_sizes[g];
    const int64_t share = (rows + pieces - 1) / pieces;
    const int64_t piece = (share + kPieceAlign - 1) / kPieceAlign * kPieceAlign;
    int64_t left = rows;
    for (int p = 0; p < pieces; ++p) {
      const int64_t size = p + 1 == pieces ? left : std::min(piece, left);
      sizes.push_back(size);
      left -= size;
    }
  }
  return sizes;
}

}  // namespace grouped_linear::cuda::sm90
