// Delayed scaling's step boundary for every scaled tensor set of a model at
// once, dispatched on the context's device: on the CPU the reference loop
// (delayed_scaling.h) over the sets, on CUDA one launch for all of them.
// Both give the same bits.
#pragma once

#include "core/fp8/delayed_scaling.h"
#include "core/grouped_gemm.h"

namespace grouped_linear::fp8 {

// One set of tensors sharing a history buffer, and the largest value of their
// format: E4M3 (forward tensors) and E5M2 (gradients) sets differ.
struct DelayedScalingUpdate {
  DelayedScalingGroup group;  // buffers on ctx's device
  float fp8_max = 0.f;        // format_info(format).max
};

// For each of the `count` sets, what update_delayed_scaling(set.group,
// set.fp8_max, margin, algo, check_finite) does; margin and algo belong to the
// recipe. With check_finite, a non-finite amax in any set throws (naming the
// set and the tensor) before anything is updated; on CUDA this check reads a
// flag back (a synchronisation: it is a debug mode).
void update_delayed_scaling(const DelayedScalingUpdate* sets, int count, int margin, AmaxAlgo algo,
                            bool check_finite, const ExecContext& ctx);

}  // namespace grouped_linear::fp8
