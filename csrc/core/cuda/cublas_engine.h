// The cuBLAS engine: one cublasGemmEx per non-empty group. Correct for every
// dtype on every CUDA GPU; its host cost grows with the number of groups, and
// device group sizes are read back with a stream sync. It is the fallback and
// the cross-check for the grouped kernels.
#pragma once

#include "core/grouped_gemm.h"

namespace grouped_linear::cuda {

GroupedGemmEngine& cublas_engine();

}  // namespace grouped_linear::cuda
