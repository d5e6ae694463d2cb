#include "torch_binding/recipe_ints.h"

#include "core/error.h"

namespace grouped_linear::torch_binding {

std::vector<int64_t> recipe_ints(const fp8::Recipe& r) {
  return {static_cast<int64_t>(r.kind),
          static_cast<int64_t>(r.format),
          r.margin,
          r.amax_history_len,
          static_cast<int64_t>(r.amax_compute_algo),
          r.power_2_scales ? 1 : 0,
          fp8::split_accumulator_bits(r)};
}

fp8::Recipe recipe_from_ints(at::IntArrayRef v) {
  GL_CHECK_VALUE(v.size() == kRecipeInts,
                 "recipe: expected 7 ints (kind, format, margin, history length, "
                 "amax algorithm, power-of-2 scales, split-accumulator bits), got ",
                 v.size());
  GL_CHECK_VALUE(v[0] >= 0 && v[0] <= 2, "recipe: kind code ", v[0], "; expected 0, 1 or 2");
  GL_CHECK_VALUE(v[1] >= 0 && v[1] <= 2, "recipe: format code ", v[1], "; expected 0, 1 or 2");
  GL_CHECK_VALUE(v[4] == 0 || v[4] == 1, "recipe: amax algorithm code ", v[4], "; expected 0 or 1");
  GL_CHECK_VALUE(v[6] >= 0 && v[6] <= 7, "recipe: split-accumulator bits ", v[6],
                 "; expected 0 to 7 (fprop 1, dgrad 2, wgrad 4)");
  fp8::Recipe r;
  r.kind = static_cast<fp8::RecipeKind>(v[0]);
  r.format = static_cast<fp8::FormatChoice>(v[1]);
  r.margin = static_cast<int>(v[2]);
  r.amax_history_len = static_cast<int>(v[3]);
  r.amax_compute_algo = static_cast<fp8::AmaxAlgo>(v[4]);
  r.power_2_scales = v[5] != 0;
  fp8::set_split_accumulator_bits(r, v[6]);
  return r;
}

}  // namespace grouped_linear::torch_binding
