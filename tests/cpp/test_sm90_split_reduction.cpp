// When the sm90 engine splits a wgrad's reduction into pieces, and the
// pieces' sizes (sm90/split_reduction.cpp). Host logic only, so it runs
// without a GPU; tests/python/test_sm90_kernels.py checks the split products
// against float64 on the GPU.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "core/cuda/sm90/split_reduction.h"

namespace grouped_linear::cuda::sm90 {
namespace {

GroupedLaunch wgrad(const std::vector<int64_t>& sizes, int64_t n, int64_t k) {
  GroupedLaunch l;
  l.role = Role::kWgrad;
  l.num_groups = static_cast<int>(sizes.size());
  l.host_sizes = sizes.data();
  l.total_rows = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  l.n = n;
  l.k = k;
  l.sm_count = 132;
  return l;
}

TEST(Sm90SplitReduction, SplitsOnlyFewOutputTilesOverLongReductions) {
  // One group, a 2048 x 768 weight (16 x 3 = 48 tiles of 128 x 256) over
  // 32768 rows: 132 / 48 = 2 pieces.
  const std::vector<int64_t> linear{32768};
  EXPECT_EQ(reduction_pieces(128, 256, wgrad(linear, 2048, 768)), 2);
  // A 256 x 512 weight (4 tiles): as many pieces as the rows allow, at most 8.
  const std::vector<int64_t> small{8192};
  EXPECT_EQ(reduction_pieces(128, 256, wgrad(small, 256, 512)), 4);
  const std::vector<int64_t> tall{1 << 20};
  EXPECT_EQ(reduction_pieces(128, 256, wgrad(tall, 256, 512)), kMaxPieces);
  // Tiles past half the SMs, short reductions, other roles: no split.
  EXPECT_EQ(reduction_pieces(128, 256, wgrad(linear, 4096, 4096)), 1);
  const std::vector<int64_t> short_rows{4095};
  EXPECT_EQ(reduction_pieces(128, 256, wgrad(short_rows, 256, 512)), 1);
  GroupedLaunch forward = wgrad(small, 256, 512);
  forward.role = Role::kForward;
  EXPECT_EQ(reduction_pieces(128, 256, forward), 1);
  // Device group sizes are not known on the host: no split.
  GroupedLaunch device = wgrad(small, 256, 512);
  device.host_sizes = nullptr;
  EXPECT_EQ(reduction_pieces(128, 256, device), 1);
  // Expert groups: their G x N x K grid already fills the SMs.
  const std::vector<int64_t> experts(32, 256);
  EXPECT_EQ(reduction_pieces(128, 256, wgrad(experts, 4096, 7168)), 1);
  // Two groups of 6000 rows and 4 tiles each: 8 tiles, 2 pieces (rows).
  const std::vector<int64_t> two{6000, 6000};
  EXPECT_EQ(reduction_pieces(128, 256, wgrad(two, 256, 512)), 2);
}

TEST(Sm90SplitReduction, AForcedKernelIsNeverSplit) {
  const std::vector<int64_t> small{8192};
  const std::string forced = all_kernels().front().name;
  set_kernel_override(forced);
  const int pieces = reduction_pieces(128, 256, wgrad(small, 256, 512));
  set_kernel_override("");
  EXPECT_EQ(pieces, 1) << "with " << forced << " forced";
  EXPECT_EQ(reduction_pieces(128, 256, wgrad(small, 256, 512)), 4);
}

TEST(Sm90SplitReduction, PiecesCoverEachGroupAtAlignedStarts) {
  const std::vector<int64_t> groups{8192, 1000, 0, 130, 7777};
  const int pieces = 3;
  const std::vector<int64_t> sizes = piece_sizes(groups.data(), 5, pieces);
  ASSERT_EQ(sizes.size(), groups.size() * pieces);
  for (size_t g = 0; g < groups.size(); ++g) {
    // Every piece starts at a multiple of kPieceAlign rows into its group:
    // a piece of another size is followed by empty ones only.
    int64_t sum = 0;
    bool ended = false;
    for (int p = 0; p < pieces; ++p) {
      const int64_t size = sizes[g * pieces + p];
      EXPECT_GE(size, 0);
      if (ended) {
        EXPECT_EQ(size, 0) << "group " << g << " piece " << p;
      }
      ended = ended || size % kPieceAlign != 0;
      sum += size;
    }
    EXPECT_EQ(sum, groups[g]) << "group " << g;
  }
  // 8192 in three: 2816, 2816, 2560; 130: 128, 2, 0; empty stays empty.
  EXPECT_EQ(sizes[0], 2816);
  EXPECT_EQ(sizes[1], 2816);
  EXPECT_EQ(sizes[2], 2560);
  EXPECT_EQ(sizes[9], 128);
  EXPECT_EQ(sizes[10], 2);
  EXPECT_EQ(sizes[11], 0);
  EXPECT_EQ(sizes[6] + sizes[7] + sizes[8], 0);
}

}  // namespace
}  // namespace grouped_linear::cuda::sm90
