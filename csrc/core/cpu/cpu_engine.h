// The CPU reference engine: float32 accumulation, any sizes, empty groups.
// It is what CI tests the modules against and what runs on machines without
// a GPU; speed is secondary to being obviously right.
#pragma once

#include "core/grouped_gemm.h"

namespace grouped_linear::cpu {

GroupedGemmEngine& reference_engine();

}  // namespace grouped_linear::cpu
