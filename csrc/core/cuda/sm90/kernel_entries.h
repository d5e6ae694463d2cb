// One function per kernel instantiation, each defined in its own .cu file
// (named after the function) so that they compile in parallel.
#pragma once

#include "core/cuda/sm90/grouped_gemm_sm90.h"

namespace grouped_linear::cuda::sm90 {

KernelEntry forward_bf16();
KernelEntry forward_fp16();
KernelEntry dgrad_bf16();
KernelEntry dgrad_fp16();
KernelEntry wgrad_bf16();
KernelEntry wgrad_fp16();
KernelEntry wgrad_bf16_into_fp32();
KernelEntry wgrad_fp16_into_fp32();

}  // namespace grouped_linear::cuda::sm90
