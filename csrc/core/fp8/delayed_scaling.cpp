#include "core/fp8/delayed_scaling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/fp8/quantize.h"

namespace grouped_linear::fp8 {

void update_delayed_scaling(const DelayedScalingGroup& g, float fp8_max, int margin, AmaxAlgo algo,
                            bool check_finite) {
  GL_CHECK_VALUE(g.history_len >= 1 && g.num_tensors >= 0, "amax_history: got shape [",
                 g.history_len, ", ", g.num_tensors, "], expected at least one row");
  const int64_t n = g.num_tensors;
  std::vector<float> amax(static_cast<size_t>(n), 0.f);
  for (int64_t t = 0; t < n; ++t) {
    float a = g.history[t];  // row 0: this step
    if (algo == AmaxAlgo::kMax) {
      for (int64_t h = 1; h < g.history_len; ++h) {
        const float v = g.history[h * n + t];
        a = (std::isnan(a) || std::isnan(v)) ? std::numeric_limits<float>::quiet_NaN()
                                             : std::max(a, v);
      }
    }
    if (check_finite) {
      GL_CHECK_VALUE(std::isfinite(a), "amax of tensor ", t, " is ", a,
                     ", expected a finite value (an overflow or NaN upstream; scales unchanged)");
    }
    amax[static_cast<size_t>(t)] = a;
  }
  for (int64_t t = 0; t < n; ++t) {
    g.scale[t] = scale_from_amax(amax[static_cast<size_t>(t)], fp8_max, margin, g.scale[t], false);
    g.scale_inv[t] = 1.f / g.scale[t];
  }
  // Roll: row h takes row h-1, row 0 starts the next step at zero.
  for (int64_t h = g.history_len - 1; h >= 1; --h)
    std::copy(g.history + (h - 1) * n, g.history + h * n, g.history + h * n);
  std::fill(g.history, g.history + n, 0.f);
}

}  // namespace grouped_linear::fp8
