// Tile configurations and the macro that instantiates one kernel per .cu
// file. Which configuration each role uses is chosen by measurement on an
// H200 (BENCHMARKS.md, `python -m bench.tune_sm90`); the choice itself is in
// kernel_table.cpp.
#pragma once

#include "core/cuda/sm90/grouped_gemm_sm90.cuh"

namespace grouped_linear::cuda::sm90 {

//                      M    N    K  cluster cooperative
using Coop128x256 = TileConfig<128, 256, 64, 1, true>;
using Coop128x128 = TileConfig<128, 128, 64, 1, true>;
using Coop256x128 = TileConfig<256, 128, 64, 1, true>;
using Ping128x128 = TileConfig<128, 128, 64, 1, false>;
using Ping64x256 = TileConfig<64, 256, 64, 1, false>;

}  // namespace grouped_linear::cuda::sm90

// Defines `KernelEntry fn()` for one role, dtype pair and configuration.
#define GL_SM90_KERNEL(fn, role, element_in, element_out, config)                      \
  namespace grouped_linear::cuda::sm90 {                                               \
  KernelEntry fn() {                                                                   \
    return GroupedGemmRunner<Role::role, element_in, element_out, config>::entry(#fn); \
  }                                                                                    \
  }
