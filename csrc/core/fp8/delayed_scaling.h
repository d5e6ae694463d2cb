// Delayed scaling's step boundary on the CPU (the reference for the fused
// GPU update): for every tensor of a group, take its amax from the history,
// turn it into the next scale, then roll the history for the next step.
//
// history is [history_len, num_tensors], row-major; row 0 holds the current
// step's amax (written by the casts during the step). After the update row 0
// is zero and the older rows moved one down (the oldest row is dropped).
#pragma once

#include <cstdint>

#include "core/fp8/recipe.h"

namespace grouped_linear::fp8 {

struct DelayedScalingGroup {
  float* history = nullptr;  // [history_len, num_tensors]
  float* scale = nullptr;    // [num_tensors], previous scale in, next scale out
  float* scale_inv = nullptr;
  int64_t history_len = 0;
  int64_t num_tensors = 0;
};

// amax per tensor: the max over the history (AmaxAlgo::kMax) or row 0
// (kMostRecent). scale = fp8_max / amax / 2^margin; a zero, infinite or NaN
// amax keeps the previous scale. With check_finite, an infinite or NaN amax
// throws instead, naming the tensor, and nothing is updated.
void update_delayed_scaling(const DelayedScalingGroup& group, float fp8_max, int margin,
                            AmaxAlgo algo, bool check_finite);

}  // namespace grouped_linear::fp8
