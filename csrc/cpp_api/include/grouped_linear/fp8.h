// FP8 training in the C++ API: the recipes, with Transformer Engine's names
// and defaults as in Python (grouped_linear.fp8), and the autocast region.
//
//   {
//     grouped_linear::Fp8Autocast fp8(grouped_linear::DelayedScaling{});
//     y = experts->forward(x, m_splits);
//   }  // leaving the outermost region: delayed scaling's step boundary
//   loss(y).backward();
//
// Inside an enabled region GroupedLinear and Linear run forward, dgrad and
// wgrad in FP8 with the region's recipe, each module keeping its FP8 state
// (delayed scaling's amax histories and scales, the cached quantized
// weights), which save() writes under the key "_extra_state" (the Python
// modules' name; the same flat float32 tensor). On the CPU the FP8 numerics
// are emulated.
#pragma once

#include <string>
#include <variant>

namespace grouped_linear {

// HYBRID: E4M3 for activations and weights, E5M2 for gradients.
enum class Fp8Format { kE4M3, kE5M2, kHybrid };

// One FP8 GEMM's options: use_split_accumulator = true sums in float32
// (the tensor core's partial sums promoted every k-block), false allows the
// tensor core's faster, narrower accumulator.
struct MMParams {
  bool use_split_accumulator = true;
};

// Per-tensor scales from the amax history of earlier steps.
struct DelayedScaling {
  int margin = 0;
  Fp8Format fp8_format = Fp8Format::kHybrid;
  int amax_history_len = 1024;
  std::string amax_compute_algo = "max";  // or "most_recent"
  MMParams fp8_gemm_fprop{false};
  MMParams fp8_gemm_dgrad{true};
  MMParams fp8_gemm_wgrad{true};
};

// Per-tensor scales from each tensor's own amax, computed in every cast.
struct Float8CurrentScaling {
  Fp8Format fp8_format = Fp8Format::kHybrid;
  MMParams fp8_gemm_fprop{false};
  MMParams fp8_gemm_dgrad{true};
  MMParams fp8_gemm_wgrad{true};
};

// One power-of-two fp32 scale per 1x128 tile of activations and gradients
// and per 128x128 tile of weights.
struct Float8BlockScaling {
  Fp8Format fp8_format = Fp8Format::kE4M3;
  MMParams fp8_gemm_fprop{true};
  MMParams fp8_gemm_dgrad{true};
  MMParams fp8_gemm_wgrad{true};
};

using Fp8Recipe = std::variant<DelayedScaling, Float8CurrentScaling, Float8BlockScaling>;

// An autocast region of the calling thread, from construction to
// destruction (Python's `with grouped_linear.autocast(...)`). Regions nest;
// the innermost applies; enabled = false turns FP8 off inside. Leaving the
// outermost region updates the delayed-scaling scales of every module whose
// FP8 forward ran in it. A bad recipe throws c10::ValueError naming the
// field. In check mode (set_fp8_amax_check) that update throws
// c10::ValueError from the destructor on a non-finite amax, unless the
// region ends by another exception's unwinding (then only the scales stay
// unchanged).
class Fp8Autocast {
 public:
  explicit Fp8Autocast(const Fp8Recipe& recipe = DelayedScaling{}, bool enabled = true);
  ~Fp8Autocast() noexcept(false);
  Fp8Autocast(const Fp8Autocast&) = delete;
  Fp8Autocast& operator=(const Fp8Autocast&) = delete;

 private:
  int uncaught_exceptions_;  // on entry: tells unwinding from a normal exit
};

// Whether the calling thread is inside an enabled region.
bool fp8_autocast_enabled();

// Check mode (process-wide, off by default): the step boundary raises on a
// non-finite amax, naming the module and tensor, and changes no scale. On
// CUDA it reads a flag back (a synchronisation): a debugging aid.
void set_fp8_amax_check(bool enabled);

}  // namespace grouped_linear
