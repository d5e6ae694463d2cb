// FP8 training recipes as C++ values (mirrored by the Python dataclasses in
// grouped_linear/fp8.py, whose names and defaults follow Transformer
// Engine's). A recipe is resolved once when an autocast region is entered;
// modules then read one small struct, not Python objects.
#pragma once

#include <cstdint>

#include "core/fp8/fp8_format.h"

namespace grouped_linear::fp8 {

enum class RecipeKind : uint8_t { kDelayed, kCurrent, kBlock };

// HYBRID: E4M3 for forward tensors (activations, weights), E5M2 for gradients.
enum class FormatChoice : uint8_t { kE4M3, kE5M2, kHybrid };

enum class AmaxAlgo : uint8_t { kMax, kMostRecent };

struct Recipe {
  RecipeKind kind = RecipeKind::kDelayed;
  FormatChoice format = FormatChoice::kHybrid;
  int margin = 0;               // scale = fp8_max / amax / 2^margin
  int amax_history_len = 1024;  // delayed scaling only
  AmaxAlgo amax_compute_algo = AmaxAlgo::kMax;
  bool power_2_scales = false;    // block scaling: true (scales are powers of two)
  int activation_block_rows = 1;  // block scaling: 1x128 tiles for activations and gradients
  int weight_block_rows = 128;    //                128x128 tiles for weights
  int block_cols = 128;
  // Per GEMM, Transformer Engine's MMParams.use_split_accumulator: true
  // accumulates in fp32, false allows fast accumulation (fp8_gemm.h). TE's
  // defaults: the forward fast, both gradients in fp32.
  bool fprop_split_accumulator = false;
  bool dgrad_split_accumulator = true;
  bool wgrad_split_accumulator = true;
};

// The three flags as bits (fprop 1, dgrad 2, wgrad 4), as the recipe travels
// through autograd's saved data and torch.compile's int list.
inline int split_accumulator_bits(const Recipe& r) {
  return (r.fprop_split_accumulator ? 1 : 0) | (r.dgrad_split_accumulator ? 2 : 0) |
         (r.wgrad_split_accumulator ? 4 : 0);
}
inline void set_split_accumulator_bits(Recipe& r, int64_t bits) {
  r.fprop_split_accumulator = (bits & 1) != 0;
  r.dgrad_split_accumulator = (bits & 2) != 0;
  r.wgrad_split_accumulator = (bits & 4) != 0;
}

// The format of forward tensors (activations, weights) and of gradients.
inline Format forward_format(const Recipe& r) {
  return r.format == FormatChoice::kE5M2 ? Format::kE5M2 : Format::kE4M3;
}
inline Format backward_format(const Recipe& r) {
  return r.format == FormatChoice::kE4M3 ? Format::kE4M3 : Format::kE5M2;
}

}  // namespace grouped_linear::fp8
