// The CUDA implementations behind quantize_ops.h and delayed_scaling_ops.h,
// one per .cu file; quantize_ops_cuda.cu puts them in the backend table.
#pragma once

#include "core/fp8/delayed_scaling_ops.h"
#include "core/fp8/quantize_ops.h"

namespace grouped_linear::fp8::cuda_impl {

void dequantize_activation_cuda(const QuantizedActivation& q, bool columnwise,
                                const GroupSizes& splits, const MatrixView& out,
                                const ExecContext& ctx);
void dequantize_weight_cuda(const QuantizedWeight& q, bool columnwise, const GroupedMatrixView& out,
                            const ExecContext& ctx);
void update_delayed_scaling_cuda(const DelayedScalingUpdate* sets, int count, int margin,
                                 AmaxAlgo algo, bool check_finite, const ExecContext& ctx);

}  // namespace grouped_linear::fp8::cuda_impl

namespace grouped_linear::fp8::cuda_impl {

// For tests: how many float bit patterns (all 2^32) the kernels' float ->
// fp8 conversion maps to another code than to_fp8 does. Synchronises.
unsigned long long fp8_conversion_mismatches(Format format);

}  // namespace grouped_linear::fp8::cuda_impl
