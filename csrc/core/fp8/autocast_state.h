// The FP8 autocast state of the calling thread: whether FP8 is on and with
// which recipe. `grouped_linear.autocast` pushes on entry and pops on exit
// (regions nest); a module's forward reads current() once, a struct read.
#pragma once

#include <cstddef>

#include "core/fp8/recipe.h"

namespace grouped_linear::fp8 {

struct AutocastState {
  bool enabled = false;
  Recipe recipe;
};

// The innermost region's state on this thread (disabled outside any region).
const AutocastState& current();

void push(const AutocastState& state);
// Throws when no region is open on this thread.
void pop();
size_t depth();

}  // namespace grouped_linear::fp8
