// The Hopper grouped engine: each role is one grouped GEMM launch (bias fill /
// bias gradient add one small kernel each), with group sizes read on the
// device and a tile configuration chosen per problem (sm90/kernel_table.cpp). Problems its kernels
// do not cover (other dtypes, K or N not a multiple of 8, more than 1024 groups, strided operands)
// go to the cuBLAS engine.
#pragma once

#include "core/grouped_gemm.h"

namespace grouped_linear::cuda {

GroupedGemmEngine& sm90_grouped_engine();

}  // namespace grouped_linear::cuda
