// The tile configuration each role uses. Chosen by measurement on an H200
// (BENCHMARKS.md); one place to change when tuning.
#pragma once

#include "core/cuda/sm90/grouped_gemm_sm90.cuh"
#include "core/cuda/sm90/kernel_entries.h"

namespace grouped_linear::cuda::sm90 {

// 128 x 256 tiles, two consumer warpgroups cooperating on each tile.
using ForwardConfig = TileConfig<128, 256, 64, 1, true>;
using DgradConfig = TileConfig<128, 256, 64, 1, true>;
using WgradConfig = TileConfig<128, 256, 64, 1, true>;

}  // namespace grouped_linear::cuda::sm90
