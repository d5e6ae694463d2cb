// A recipe as a list of ints: the `int[] recipe` of the FP8 dispatcher ops
// (torch.compile), whose schemas take no C++ values.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "core/fp8/recipe.h"

namespace grouped_linear::torch_binding {

// kind, format, margin, history length, amax algorithm, power-of-2 scales,
// split-accumulator bits (fprop 1, dgrad 2, wgrad 4).
constexpr size_t kRecipeInts = 7;
std::vector<int64_t> recipe_ints(const fp8::Recipe& r);
// Checks count and codes (ValueError naming the field); block sizes default.
fp8::Recipe recipe_from_ints(at::IntArrayRef v);

}  // namespace grouped_linear::torch_binding
