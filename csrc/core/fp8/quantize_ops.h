// The FP8 quantization operations a layer runs, declared once and dispatched
// on the operands' device: the CPU implementation (quantize_ops_cpu.cpp,
// built on the reference in quantize.h) and the CUDA one
// (cuda/quantize_ops_cuda.cu) give the same bits.
//
// Every operation is one pass over its input on the GPU side (one launch, or
// two for current scaling: amax, then the cast), reads group sizes on the
// device when they are there, and never synchronises with the host.
#pragma once

#include "core/fp8/fp8_tensor.h"
#include "core/fp8/recipe.h"
#include "core/grouped_gemm.h"

namespace grouped_linear::fp8 {

// Where a per-tensor scale comes from, and where the cast's amax goes.
// Buffers live on the input's device; for grouped weights each holds G
// values (one per group), for activations one.
struct ScaleState {
  // kDelayed: read (the scale chosen at the last step boundary).
  // kCurrent: written when not null (the scale computed from this cast's amax).
  float* scale = nullptr;
  // Where this cast's amax goes (max-accumulated: several casts in one step
  // keep the largest), e.g. row 0 of a delayed-scaling history. May be null.
  float* amax = nullptr;
};

// Quantize activations X or dY [T, C] into the copies `out` asks for: a copy
// is produced when its `data` pointer or its scale_inv pointer is set (a
// zero-size copy has no data but still gets its per-tensor scale; views,
// dtypes and scale pointers filled in by the caller; see fp8_tensor.h for
// the layouts). The column-wise copy gets each group's codes and the zero
// padding after each group; columns past the last group's padding, and block
// scale slots past the last group's blocks, are left as they are (nothing
// reads them; writing them would cost up to 15 * G * C bytes). Group sizes
// on the device are clamped as the grouped GEMM clamps them (negative -> 0,
// rows past T dropped); host sizes are validated.
//
//   kDelayed  scale from state.scale; amax recorded into state.amax
//   kCurrent  amax of the input now, scale = scale_from_amax(amax, fmt max,
//             margin, 1, power_2_scales); recorded into state.amax and
//             state.scale when given
//   kBlock    scales per 1 x 128 block (row-wise along C, column-wise along
//             each group's rows); `state` unused
//
// scale_inv outputs are written for every copy (per-tensor: 1 / scale), so a
// saved copy stays valid after the state's scale changes.
// With `dbias` present ([G, 1, C]), also writes dbias[g] = Σ_{rows of g}
// input, accumulated in fp32 from the unquantized values: the bias gradient
// without a second pass over dY.
struct ActivationQuantize {
  MatrixView input;   // [T, C], float32 / float16 / bfloat16
  GroupSizes splits;  // needed for the column-wise copy and dbias
  RecipeKind kind = RecipeKind::kDelayed;
  Format format = Format::kE4M3;
  int margin = 0;
  bool power_2_scales = false;
  ScaleState state;
  QuantizedActivation out;
  GroupedMatrixView dbias;
};
void quantize_activation(const ActivationQuantize& request, const ExecContext& ctx);

// Quantize grouped weights W [G, N, K]: per-tensor recipes use one scale per
// group (state buffers hold G values), block scaling 128 x 128 blocks.
struct WeightQuantize {
  GroupedMatrixView input;  // [G, N, K]
  RecipeKind kind = RecipeKind::kDelayed;
  Format format = Format::kE4M3;
  int margin = 0;
  bool power_2_scales = false;
  ScaleState state;
  QuantizedWeight out;
};
void quantize_weight(const WeightQuantize& request, const ExecContext& ctx);

// A forward's X and W in one operation: the same bits and state updates as
// quantize_activation(x) then quantize_weight(w). On CUDA, when both inputs
// are 16-bit under one recipe kind and both casts fit in two waves of CTAs
// (small calls, whose cost is the launches'), they share one launch;
// otherwise they run as the two launches.
void quantize_forward_operands(const ActivationQuantize& x, const WeightQuantize& w,
                               const ExecContext& ctx);

// Back to float32 in the layout the values came from: either copy of an
// activation gives [T, C] (the column-wise one un-transposed, padding
// dropped); either copy of a weight gives [G, N, K]. The emulated FP8 GEMMs
// run on these, and tests compare with them.
void dequantize_activation(const QuantizedActivation& q, bool columnwise, const GroupSizes& splits,
                           const MatrixView& out, const ExecContext& ctx);
void dequantize_weight(const QuantizedWeight& q, bool columnwise, const GroupedMatrixView& out,
                       const ExecContext& ctx);

}  // namespace grouped_linear::fp8
