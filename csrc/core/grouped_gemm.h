// The three products of a grouped linear layer, declared once. Every engine
// (CPU reference, cuBLAS, Hopper grouped kernels) implements this interface.
//
//   forward  Y_g  = X_g · W_gᵀ (+ b_g)      grouped along M
//   dgrad    dX_g = dY_g · W_g              grouped along M
//   wgrad    dW_g = dY_gᵀ · X_g (+= dW_g)   grouped along the reduction dimension
//            db_g = Σ_rows dY_g             fused with wgrad
#pragma once

#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/views.h"

namespace grouped_linear {

namespace fp8 {
struct ForwardProblem;
struct DgradProblem;
struct WgradProblem;
}  // namespace fp8

struct ForwardProblem {
  MatrixView x;            // [T, K]
  GroupedMatrixView w;     // [G, N, K]
  GroupedMatrixView bias;  // [G, 1, N], optional
  MatrixView y;            // [T, N], written
  GroupSizes splits;
};

struct DgradProblem {
  MatrixView dy;        // [T, N]
  GroupedMatrixView w;  // [G, N, K]
  MatrixView dx;        // [T, K], written
  GroupSizes splits;
};

struct WgradProblem {
  MatrixView dy;            // [T, N]
  MatrixView x;             // [T, K]
  GroupedMatrixView dw;     // [G, N, K], optional: written, or added to when accumulate
  bool accumulate = false;  // dW += (main_grad); otherwise dW =
  GroupedMatrixView dbias;  // [G, 1, N], optional, always written
  GroupSizes splits;
};

// Where and how an engine runs: the device, its stream (a cudaStream_t for
// CUDA, null for the CPU) and the caller's allocator for workspaces.
struct ExecContext {
  Device device;
  void* stream = nullptr;
  DeviceAllocator* allocator = nullptr;
};

class GroupedGemmEngine {
 public:
  virtual ~GroupedGemmEngine() = default;
  virtual const char* name() const = 0;
  // Whether the engine runs on this device at all (e.g. Hopper-only kernels).
  virtual bool available(const Device& /*device*/) const { return true; }
  virtual void forward(const ForwardProblem& problem, const ExecContext& ctx) = 0;
  virtual void dgrad(const DgradProblem& problem, const ExecContext& ctx) = 0;
  virtual void wgrad(const WgradProblem& problem, const ExecContext& ctx) = 0;

  // Engines built from several kernels (tile configurations) list them here;
  // tests and tuning may force one by name ("" restores the automatic choice).
  virtual std::vector<std::string> kernel_names() const { return {}; }
  virtual void set_kernel_override(const std::string& name);
  // Engines with a persistent tile scheduler: the order in which CTAs walk
  // each group's output tiles, for tuning ("" restores the automatic one).
  virtual void set_tile_order(const std::string& order);
  // Engines whose kernels load operands through TMA: how much L2 fetches per
  // miss ('128B', '256B'), for tuning ("" restores the default).
  virtual void set_l2_promotion(const std::string& promotion);

  // FP8 products (core/fp8/fp8_gemm.h). An engine with FP8 kernels returns
  // true from runs_fp8 for the problems it covers and implements these;
  // otherwise fp8::run_fp8_* emulate them on the engine's unquantized path.
  virtual bool runs_fp8(const fp8::ForwardProblem&, const ExecContext&) const { return false; }
  virtual bool runs_fp8(const fp8::DgradProblem&, const ExecContext&) const { return false; }
  virtual bool runs_fp8(const fp8::WgradProblem&, const ExecContext&) const { return false; }
  virtual void fp8_forward(const fp8::ForwardProblem& problem, const ExecContext& ctx);
  virtual void fp8_dgrad(const fp8::DgradProblem& problem, const ExecContext& ctx);
  virtual void fp8_wgrad(const fp8::WgradProblem& problem, const ExecContext& ctx);
};

// Shape, dtype and device consistency of a problem, checked once before any
// engine runs. Group sizes on the host are checked too (non-negative, summing
// to T); an engine that reads device sizes back checks them with
// validate_group_sizes.
void validate(const ForwardProblem& problem);
void validate(const DgradProblem& problem);
void validate(const WgradProblem& problem);
void validate_group_sizes(const int64_t* sizes, int64_t num_groups, int64_t total_rows);

}  // namespace grouped_linear
