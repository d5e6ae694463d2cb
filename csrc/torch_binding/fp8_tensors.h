// Quantized operands as torch tensors: the owning side of core/fp8/fp8_tensor.h's
// views, and the quantize calls that fill them (core/fp8/quantize_ops.h on
// torch memory). Codes are float8_e4m3fn / float8_e5m2 tensors (1 byte per
// element), scales float32 `scale_inv`.
#pragma once

#include <ATen/ATen.h>

#include <utility>

#include "core/fp8/quantize_ops.h"
#include "core/fp8/recipe.h"
#include "torch_binding/group_splits.h"

namespace grouped_linear::torch_binding {

// How one tensor is cast: the recipe's choices for forward tensors (inputs,
// weights) or for gradients.
struct QuantizeSpec {
  fp8::RecipeKind kind = fp8::RecipeKind::kDelayed;
  fp8::Format format = fp8::Format::kE4M3;
  int margin = 0;
  bool power_2_scales = false;
  int activation_block_rows = 1;  // block scaling: 1 x block_cols tiles
  int weight_block_rows = 128;    //                weight_block_rows x block_cols tiles
  int block_cols = 128;
  // Each copy's codes and scale_inv are one allocation unless this is set:
  // for the outputs of dispatcher ops, which must not share storage.
  bool scales_apart = false;

  bool blockwise() const { return kind == fp8::RecipeKind::kBlock; }
};

QuantizeSpec forward_spec(const fp8::Recipe& recipe);
QuantizeSpec backward_spec(const fp8::Recipe& recipe);

// Activations X or dY [T, C]: the row-wise copy [T, C] and/or the column-wise
// copy [C, padded_columns(T, G)], each with its scale_inv (per-tensor: [1];
// blockwise: [T, ceil(C / 128)] and [C, column_block_capacity(T, G)]).
struct Fp8Activation {
  QuantizeSpec spec;
  int64_t rows = 0, cols = 0;  // T, C
  at::Tensor row, row_scale_inv;
  at::Tensor col, col_scale_inv;

  fp8::QuantizedActivation view() const;
};

// Weights [G, N, K]: row-wise [G, N, K] and/or column-wise [G, K, N] codes,
// scale_inv per group ([G]) or per 128 x 128 block ([G, rb, cb]).
struct Fp8Weight {
  QuantizeSpec spec;
  at::Tensor row, row_scale_inv;
  at::Tensor col, col_scale_inv;

  bool defined() const { return row.defined() || col.defined(); }
  fp8::QuantizedWeight view() const;
};

// Which quantized copies share one allocation (see fp8_tensors.cpp). A
// shared block lives as long as its longest-lived copy, so only copies that
// die together share one.
enum class CopyLifetimes {
  kApart,   // each copy its own block (e.g. a forward's X: row-wise dropped, column-wise saved)
  kShared,  // row- and column-wise in one block (dY when wgrad is not deferred)
};

// A forward's four copies by lifetime.
enum class ForwardLifetimes {
  // W is cached across micro-batches: W's two copies in one block, X's apart.
  kWeightKept,
  // {X row, W row} die after the forward's GEMM, {X col, W col} with the
  // autograd node.
  kSavedTogether,
  // As kSavedTogether, but X col outlives W col (a deferred wgrad keeps it).
  kSavedApart,
};

// Casts x [T, C] (float32 / float16 / bfloat16, unit column stride) into the
// copies asked for; `state` as in quantize_ops.h (delayed: scale read, amax
// recorded; current: may be null). With `dbias` defined ([G, C], any float
// dtype), the per-group column sums of x (summed in fp32) are written there
// in the same pass.
Fp8Activation quantize_activation(const at::Tensor& x, const GroupSplits& splits,
                                  const QuantizeSpec& spec, bool rowwise, bool columnwise,
                                  const fp8::ScaleState& state,
                                  const at::Tensor& dbias = at::Tensor(),
                                  CopyLifetimes lifetimes = CopyLifetimes::kApart);

// A forward's X and W [G, N, K], both row-wise plus the column-wise copies
// asked for (W: one scale per group, or 128 x 128 blocks), under one spec, as
// one quantize operation (fp8::quantize_forward_operands:
// one launch for small calls on CUDA). x and w on one device.
std::pair<Fp8Activation, Fp8Weight> quantize_forward_operands(
    const at::Tensor& x, const GroupSplits& splits, bool x_columnwise,
    const fp8::ScaleState& x_state, const at::Tensor& w, bool w_columnwise,
    const fp8::ScaleState& w_state, const QuantizeSpec& spec,
    ForwardLifetimes lifetimes = ForwardLifetimes::kWeightKept);

// The float32 values a copy stands for, [T, C] / [G, N, K] (tests, debugging).
at::Tensor dequantized(const Fp8Activation& q, bool columnwise, const GroupSplits& splits);
at::Tensor dequantized(const Fp8Weight& q, bool columnwise);

at::ScalarType code_scalar_type(fp8::Format format);

// Registers the dtype conversion the emulated FP8 GEMMs need on CUDA
// (fp8::set_convert), on torch's copy_. Called once when the module loads.
void register_fp8_emulation();

}  // namespace grouped_linear::torch_binding
