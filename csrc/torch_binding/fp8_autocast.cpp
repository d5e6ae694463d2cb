#include "torch_binding/fp8_autocast.h"

#include "core/error.h"
#include "core/fp8/autocast_state.h"
#include "torch_binding/fp8_state.h"

namespace grouped_linear::torch_binding {

fp8::Recipe make_recipe(const std::string& kind, const std::string& format, int margin,
                        int amax_history_len, const std::string& amax_compute_algo,
                        bool power_2_scales, bool fprop_split_accumulator,
                        bool dgrad_split_accumulator, bool wgrad_split_accumulator) {
  fp8::Recipe r;
  if (kind == "delayed") {
    r.kind = fp8::RecipeKind::kDelayed;
  } else if (kind == "current") {
    r.kind = fp8::RecipeKind::kCurrent;
  } else {
    GL_CHECK_VALUE(kind == "block", "kind: got '", kind,
                   "', expected 'delayed', 'current' or 'block'");
    r.kind = fp8::RecipeKind::kBlock;
  }
  if (format == "E4M3") {
    r.format = fp8::FormatChoice::kE4M3;
  } else if (format == "E5M2") {
    r.format = fp8::FormatChoice::kE5M2;
  } else {
    GL_CHECK_VALUE(format == "HYBRID", "fp8_format: got '", format,
                   "', expected 'E4M3', 'E5M2' or 'HYBRID'");
    r.format = fp8::FormatChoice::kHybrid;
  }
  GL_CHECK_VALUE(margin >= 0, "margin: got ", margin, ", expected an int >= 0");
  GL_CHECK_VALUE(amax_history_len >= 1, "amax_history_len: got ", amax_history_len,
                 ", expected an int >= 1");
  r.margin = margin;
  r.amax_history_len = amax_history_len;
  if (amax_compute_algo == "max") {
    r.amax_compute_algo = fp8::AmaxAlgo::kMax;
  } else {
    GL_CHECK_VALUE(amax_compute_algo == "most_recent", "amax_compute_algo: got '",
                   amax_compute_algo, "', expected 'max' or 'most_recent'");
    r.amax_compute_algo = fp8::AmaxAlgo::kMostRecent;
  }
  r.power_2_scales = power_2_scales;
  r.fprop_split_accumulator = fprop_split_accumulator;
  r.dgrad_split_accumulator = dgrad_split_accumulator;
  r.wgrad_split_accumulator = wgrad_split_accumulator;
  return r;
}

void autocast_push(bool enabled, const fp8::Recipe& recipe) {
  fp8::AutocastState state;
  state.enabled = enabled;
  state.recipe = recipe;
  if (fp8::depth() == 0) begin_autocast_region();
  fp8::push(state);
}
// Leaving the outermost region is delayed scaling's step boundary
// (fp8_state.h): the region is closed first, so a failing update (check
// mode) still leaves the thread outside any region.
void autocast_pop() {
  fp8::pop();
  if (fp8::depth() == 0) end_autocast_region();
}

}  // namespace grouped_linear::torch_binding
