// The second pass of a wgrad split along its reduction (sm90/split_reduction.h):
// out[g] = Σ_p partials[g * pieces + p] (+ out[g] when accumulating), each a
// float32 matrix of `elements` values, summed in float32 in the order of p
// and stored in out's dtype (float32, float16 or bfloat16).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace grouped_linear::cuda {

void launch_sum_partials(const float* partials, int groups, int pieces, int64_t elements, void* out,
                         DType out_dtype, bool accumulate, cudaStream_t stream);

}  // namespace grouped_linear::cuda
