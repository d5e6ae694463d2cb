// Which way the sm90 kernels' CTAs walk a group's output tiles
// (sm90/tile_order.cpp). Host logic only, so it runs without a GPU; the GPU
// tests run the kernels under each order (tests/python/test_sm90_kernels.py).
#include <gtest/gtest.h>

#include <string>

#include "core/cuda/sm90/grouped_gemm_sm90.h"
#include "core/error.h"

namespace grouped_linear::cuda::sm90 {
namespace {

KernelEntry tile(int m, int n) {
  KernelEntry e;
  e.name = "test_tile";
  e.tile_m = m;
  e.tile_n = n;
  return e;
}

GroupedLaunch launch(Role role, int groups, int64_t rows, int64_t n, int64_t k) {
  GroupedLaunch l;
  l.role = role;
  l.num_groups = groups;
  l.total_rows = rows;
  l.n = n;
  l.k = k;
  return l;
}

// Restores the automatic order however a test ends.
struct TileOrderGuard {
  ~TileOrderGuard() { set_tile_order(""); }
};

TEST(Sm90TileOrder, ShorterSideFollowsEachRolesTileGrid) {
  const KernelEntry wide = tile(128, 256);
  // wgrad's tile grid is out_features x in_features whatever the rows:
  // mixtral fc1 (28672 x 4096: 224 x 16 tiles) walks along N, fc2 (4096 x
  // 14336: 32 x 56) along M.
  EXPECT_TRUE(shorter_side_is_n(wide, launch(Role::kWgrad, 8, 16384, 28672, 4096)));
  EXPECT_FALSE(shorter_side_is_n(wide, launch(Role::kWgrad, 8, 16384, 4096, 14336)));
  EXPECT_TRUE(shorter_side_is_n(wide, launch(Role::kWgrad, 8, 16, 28672, 4096)));
  // The forward's: average rows x out_features. Expert groups (2048 rows: 16
  // x 112 tiles) walk along M; one group of 16384 rows (128 x 16) along N.
  EXPECT_FALSE(shorter_side_is_n(wide, launch(Role::kForward, 8, 16384, 28672, 4096)));
  EXPECT_TRUE(shorter_side_is_n(wide, launch(Role::kForward, 1, 16384, 4096, 4096)));
  // dgrad's: average rows x in_features.
  EXPECT_FALSE(shorter_side_is_n(wide, launch(Role::kDgrad, 8, 16384, 4096, 14336)));
  EXPECT_TRUE(shorter_side_is_n(wide, launch(Role::kDgrad, 1, 16384, 14336, 2048)));
  // Equal sides walk along N, as CUTLASS's rule does; no rows, along M.
  EXPECT_TRUE(shorter_side_is_n(wide, launch(Role::kForward, 1, 1024, 2048, 512)));
  EXPECT_FALSE(shorter_side_is_n(tile(128, 128), launch(Role::kForward, 1, 1024, 2048, 512)));
  EXPECT_FALSE(shorter_side_is_n(wide, launch(Role::kForward, 0, 0, 2048, 512)));
}

TEST(Sm90TileOrder, AutomaticIsTheShorterSideForWgradAndAlongNForTallGroups) {
  TileOrderGuard guard;
  const KernelEntry wide = tile(128, 256);
  const GroupedLaunch tall = launch(Role::kWgrad, 8, 16384, 28672, 4096);  // shorter side: N
  const GroupedLaunch flat = launch(Role::kWgrad, 8, 16384, 4096, 14336);  // shorter side: M
  EXPECT_TRUE(raster_along_n(wide, tall));
  EXPECT_FALSE(raster_along_n(wide, flat));
  // The forward and dgrad walk along M where the shorter side is N but the
  // groups' rows are less than twice the output's columns: mixtral fc2's
  // forward (16 x 16 tiles: 2048 rows a group, 4096 columns).
  const GroupedLaunch square = launch(Role::kForward, 8, 16384, 4096, 14336);
  ASSERT_TRUE(shorter_side_is_n(wide, square));
  EXPECT_FALSE(raster_along_n(wide, square));
  // From twice on, along N: one group of 16384 rows into 8192 columns
  // (the forward's out_features) or 2048 (dgrad's in_features), not 16383.
  EXPECT_TRUE(raster_along_n(wide, launch(Role::kForward, 1, 16384, 8192, 14336)));
  EXPECT_FALSE(raster_along_n(wide, launch(Role::kForward, 1, 16383, 8192, 14336)));
  EXPECT_TRUE(raster_along_n(wide, launch(Role::kDgrad, 1, 16384, 14336, 2048)));
  EXPECT_FALSE(raster_along_n(wide, launch(Role::kDgrad, 1, 16384, 2048, 14336)));
  // The average rows decide: qwen3 fc1's rows as 128 experts of 256 rows
  // walk along M, as one group along N; no rows, along M.
  EXPECT_FALSE(raster_along_n(wide, launch(Role::kForward, 128, 32768, 1536, 2048)));
  EXPECT_TRUE(raster_along_n(wide, launch(Role::kForward, 1, 32768, 1536, 2048)));
  EXPECT_FALSE(raster_along_n(wide, launch(Role::kForward, 0, 0, 2048, 512)));
  set_tile_order("along_m");
  EXPECT_FALSE(raster_along_n(wide, tall));
  set_tile_order("along_n");
  EXPECT_TRUE(raster_along_n(wide, tall));
  EXPECT_TRUE(raster_along_n(wide, flat));
  set_tile_order("shorter_side");
  EXPECT_TRUE(raster_along_n(wide, tall));
  EXPECT_FALSE(raster_along_n(wide, flat));
  set_tile_order("along_m");
  EXPECT_FALSE(raster_along_n(wide, tall));
  set_tile_order("along_n");
  set_tile_order("");
  EXPECT_TRUE(raster_along_n(wide, tall));
  EXPECT_FALSE(raster_along_n(wide, flat));
}

TEST(Sm90TileOrder, UnknownOrderIsRefusedAndChangesNothing) {
  TileOrderGuard guard;
  const KernelEntry wide = tile(128, 256);
  const GroupedLaunch tall = launch(Role::kWgrad, 8, 16384, 28672, 4096);
  set_tile_order("along_n");
  try {
    set_tile_order("diagonal");
    FAIL() << "an unknown tile order was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_NE(std::string(e.what()).find("tile order: got 'diagonal'"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(raster_along_n(wide, tall));
}

}  // namespace
}  // namespace grouped_linear::cuda::sm90
