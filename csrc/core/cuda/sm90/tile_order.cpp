// The order in which a launch's persistent CTAs walk each group's output
// tiles (CUTLASS's raster order). Consecutive tiles go to neighbouring CTAs,
// so a wave of them shares the operand panels it sweeps in L2: along M, a
// wave covers tiles of one column of N, sharing B's column panel, and every
// column re-reads A's whole panel (the group's M x K), from L2 when it fits
// and from memory when it does not; along N the operands swap roles.
// CUTLASS's grouped scheduler walks along M unless told otherwise, since M
// can differ per group; ours knows each role's fixed side (wgrad's M and N
// are out_features and in_features for every group, the forward's and
// dgrad's N likewise) and the average rows of the other.
//
// Automatic: wgrad along the shorter side; the forward and dgrad along M
// unless a group's rows are at least twice the output's columns.
// wgrad's grid is out_features x in_features for every group; along M a
// wave re-reads each dYᵀ panel (out_features rows) once per column of
// tiles, which for a tall grid (mixtral fc1: 224 x 16 tiles, a column's
// panels 59-120 MB, more than L2) comes from memory each time. On one H200
// (benchmarks/h200-2026-12-06-f0723be-tile-order-ab.json, -tile-order-tune.txt
// and -tune-order-*-mixtral.json) the shorter side took mixtral fc1's
// wgrads from 0.57-0.81 to 0.61-0.88 of dense and its FP8 steps 2-4%
// shorter with skewed routing; along N lost at fc2 (32 x 56: along M
// either way), and at 32-128 experts the orders were within noise.
// The forward and dgrad: expert groups have few rows next to the output's
// columns, and along M shares each expert's weight panel across its rows.
// One tall group (Linear on many rows, or a few experts with many rows each)
// along M re-reads A's panel from memory for every column of tiles once it
// outgrows L2. On one H100 (benchmarks/h100-2026-12-06-group-probe-tile-
// orders.json: the six cases' rows as one group, uniform and skewed, FP8
// and bf16, forward and dgrad) along N moved the 16 one-group products with
// rows >= 2 x columns by -0.04 to +0.20 of dense against along M (qwen3's
// shapes 0.71-0.78 -> 0.86-0.94), those at 1.14 x by -0.18 to +0.03 (bf16
// dgrad at mixtral fc2's shape -0.18), and the benchmark's expert
// groupings (rows <= 0.5 x columns) by -0.40 to +0.08.
#include <atomic>
#include <string>

#include "core/cuda/sm90/grouped_gemm_sm90.h"
#include "core/cuda/sm90/tile_count.h"
#include "core/error.h"

namespace grouped_linear::cuda::sm90 {
namespace {

// The order set by set_tile_order, or kAutomatic (no setting).
constexpr int kAutomatic = -1;
std::atomic<int> g_order{kAutomatic};

// How many times the output's columns a group's rows must be for the
// forward and dgrad to walk along N (measured above).
constexpr int64_t kTallGroupRatio = 2;

// The forward's and dgrad's automatic rule: their groups' average rows
// against the output's columns (out_features for the forward, in_features
// for dgrad).
bool groups_are_tall(const GroupedLaunch& launch) {
  const int64_t groups = launch.num_groups > 0 ? launch.num_groups : 1;
  const int64_t columns = launch.role == Role::kDgrad ? launch.k : launch.n;
  return columns > 0 && launch.total_rows / groups >= kTallGroupRatio * columns;
}

}  // namespace

// CUTLASS's rule for single GEMMs (tile_scheduler_params.h): sweep along M
// when N has more tiles, else along N, so that the panel re-read on every
// sweep is the smaller one. A group's M is its rows (the average, for the
// forward and dgrad) or, for wgrad, out_features.
bool shorter_side_is_n(const KernelEntry& kernel, const GroupedLaunch& launch) {
  const int64_t groups = launch.num_groups > 0 ? launch.num_groups : 1;
  const int64_t m = launch.role == Role::kWgrad ? launch.n : launch.total_rows / groups;
  const int64_t n = launch.role == Role::kDgrad   ? launch.k
                    : launch.role == Role::kWgrad ? launch.k
                                                  : launch.n;
  return !(tiles(n, kernel.tile_n) > tiles(m, kernel.tile_m));
}

bool raster_along_n(const KernelEntry& kernel, const GroupedLaunch& launch) {
  const int order = g_order.load(std::memory_order_relaxed);
  if (order == kAutomatic)
    return launch.role == Role::kWgrad ? shorter_side_is_n(kernel, launch)
                                       : groups_are_tall(launch);
  switch (static_cast<TileOrder>(order)) {
    case TileOrder::kAlongM: return false;
    case TileOrder::kAlongN: return true;
    case TileOrder::kShorterSide: return shorter_side_is_n(kernel, launch);
  }
  return false;
}

void set_tile_order(const std::string& order) {
  const bool known =
      order.empty() || order == "along_m" || order == "along_n" || order == "shorter_side";
  GL_CHECK_VALUE(known, "tile order: got '", order,
                 "', expected '' (automatic: wgrad along the shorter side, the forward and "
                 "dgrad along M unless each group's rows are at least twice the output's "
                 "columns), 'along_m', 'along_n' or 'shorter_side'");
  g_order.store(order.empty()             ? kAutomatic
                : order == "along_n"      ? static_cast<int>(TileOrder::kAlongN)
                : order == "shorter_side" ? static_cast<int>(TileOrder::kShorterSide)
                                          : static_cast<int>(TileOrder::kAlongM),
                std::memory_order_relaxed);
}

}  // namespace grouped_linear::cuda::sm90
