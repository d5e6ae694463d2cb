// The three products of a grouped linear layer on FP8 operands. Operands are
// the copies fp8_tensor.h describes; accumulation is fp32; the output is
// bf16, fp16 or fp32 (dW may be accumulated into, as main_grad).
//
//   forward  Y_g  = dequant(X_g) · dequant(W_g)ᵀ (+ b_g)
//   dgrad    dX_g = dequant(dY_g) · dequant(W_g)
//   wgrad    dW_g = dequant(dY_g)ᵀ · dequant(X_g) (+= dW_g)
//
// run_fp8_* pick the engine's FP8 kernels when it has them for the problem
// and otherwise emulate: dequantize to float32 (quantize_ops.h) and run the
// unquantized product on the same engine. The emulation is the CPU path and
// the reference the GPU kernels are tested against.
//
// split_accumulator (a recipe's use_split_accumulator for that GEMM):
// true keeps fp32 accumulation; false allows an engine's fast-accumulation
// kernel, which sums in the tensor core's narrower accumulator (sm90: no
// fp32 promotion of partial sums). The emulation accumulates in fp32 either
// way.
#pragma once

#include "core/fp8/fp8_tensor.h"
#include "core/grouped_gemm.h"

namespace grouped_linear::fp8 {

struct ForwardProblem {
  QuantizedActivation x;   // row-wise [T, K]
  QuantizedWeight w;       // row-wise [G][N, K]
  GroupedMatrixView bias;  // [G, 1, N], optional, high precision
  MatrixView y;            // [T, N], written
  GroupSizes splits;
  bool split_accumulator = true;
};

struct DgradProblem {
  QuantizedActivation dy;  // row-wise [T, N]
  QuantizedWeight w;       // column-wise [G][K, N]
  MatrixView dx;           // [T, K], written
  GroupSizes splits;
  bool split_accumulator = true;
};

struct WgradProblem {
  QuantizedActivation dy;  // column-wise [N, padded T]
  QuantizedActivation x;   // column-wise [K, padded T]
  GroupedMatrixView dw;    // [G, N, K], written, or added to when accumulate
  bool accumulate = false;
  GroupSizes splits;
  int64_t total_rows = 0;  // T (the column-wise copies only hold the padded width)
  bool split_accumulator = true;
};

void run_fp8_forward(GroupedGemmEngine& engine, const ForwardProblem& problem,
                     const ExecContext& ctx);
void run_fp8_dgrad(GroupedGemmEngine& engine, const DgradProblem& problem, const ExecContext& ctx);
void run_fp8_wgrad(GroupedGemmEngine& engine, const WgradProblem& problem, const ExecContext& ctx);

// The emulation alone (what run_fp8_* fall back to), for tests.
void emulate_fp8_forward(GroupedGemmEngine& engine, const ForwardProblem& problem,
                         const ExecContext& ctx);
void emulate_fp8_dgrad(GroupedGemmEngine& engine, const DgradProblem& problem,
                       const ExecContext& ctx);
void emulate_fp8_wgrad(GroupedGemmEngine& engine, const WgradProblem& problem,
                       const ExecContext& ctx);

// Shape, dtype and device checks of an FP8 problem (run_fp8_* and the
// emulation call them; an engine's fp8_* may assume a validated problem).
void validate(const ForwardProblem& problem);
void validate(const DgradProblem& problem);
void validate(const WgradProblem& problem);

// The emulation's one step that no engine does: copying a float32 result
// into a bfloat16 / float16 output (or a high-precision bias into float32),
// between two views of one shape on one device. The CPU's is built in; the
// binding registers one for CUDA (on torch's copy_, on ctx's stream), so the
// core needs no kernel of its own for a path the FP8 GEMM kernels replace.
using ConvertFn = void (*)(const GroupedMatrixView& src, const GroupedMatrixView& dst,
                           const ExecContext& ctx);
void set_convert(DeviceType device_type, ConvertFn fn);
void convert(const GroupedMatrixView& src, const GroupedMatrixView& dst, const ExecContext& ctx);

}  // namespace grouped_linear::fp8
