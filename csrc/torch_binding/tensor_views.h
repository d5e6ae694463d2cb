// at::Tensor -> core views. The only place that knows both type systems.
#pragma once

#include <ATen/ATen.h>

#include "core/views.h"

namespace grouped_linear::torch_binding {

DType to_core_dtype(at::ScalarType type, const char* arg_name);
Device to_core_device(const at::Device& device);

// A 2-D tensor as a row-major matrix (rows must be unit-stride in columns).
MatrixView matrix_view(const at::Tensor& t, const char* arg_name);
// A 3-D [G, N, K] tensor as G matrices.
GroupedMatrixView grouped_view(const at::Tensor& t, const char* arg_name);
// A [G, N] bias (or its gradient) as G matrices of one row; absent if undefined.
GroupedMatrixView bias_view(const at::Tensor& t, const char* arg_name);

}  // namespace grouped_linear::torch_binding
