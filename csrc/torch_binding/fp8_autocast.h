// FP8 recipes from Transformer Engine's names, and entering and leaving
// grouped_linear's autocast regions: declared once for both front ends, the
// Python module (_C.fp8, python/grouped_linear/fp8.py) and the C++ API
// (grouped_linear/fp8.h).
#pragma once

#include <string>

#include "core/fp8/recipe.h"

namespace grouped_linear::torch_binding {

// kind: "delayed", "current" or "block"; format: "E4M3", "E5M2" or "HYBRID";
// amax_compute_algo: "max" or "most_recent". ValueError naming the argument
// for anything else, for margin < 0 and for amax_history_len < 1.
fp8::Recipe make_recipe(const std::string& kind, const std::string& format, int margin,
                        int amax_history_len, const std::string& amax_compute_algo,
                        bool power_2_scales, bool fprop_split_accumulator,
                        bool dgrad_split_accumulator, bool wgrad_split_accumulator);

// Enters a region on the calling thread (regions nest; the innermost's
// recipe applies). The outermost one collects the FP8 states its forwards
// use (fp8_state.h).
void autocast_push(bool enabled, const fp8::Recipe& recipe);
// Leaves the innermost region. Leaving the outermost is delayed scaling's
// step boundary, which raises in check mode on a non-finite amax; the thread
// is outside the region either way.
void autocast_pop();

}  // namespace grouped_linear::torch_binding
