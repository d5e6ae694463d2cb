// How the device-independent entry points of quantize_ops.h and
// delayed_scaling_ops.h reach an implementation. gl_core holds the CPU one
// and a table per device type; the CUDA library (built separately, with
// nvcc) fills the CUDA entry when it registers itself. Requests reach a
// backend already validated (quantize_ops_dispatch.cpp).
#pragma once

#include "core/fp8/delayed_scaling_ops.h"
#include "core/fp8/quantize_ops.h"

namespace grouped_linear::fp8 {

struct QuantizeOpsBackend {
  void (*quantize_activation)(const ActivationQuantize& request, const ExecContext& ctx);
  void (*quantize_weight)(const WeightQuantize& request, const ExecContext& ctx);
  void (*quantize_forward_operands)(const ActivationQuantize& x, const WeightQuantize& w,
                                    const ExecContext& ctx);
  void (*dequantize_activation)(const QuantizedActivation& q, bool columnwise,
                                const GroupSizes& splits, const MatrixView& out,
                                const ExecContext& ctx);
  void (*dequantize_weight)(const QuantizedWeight& q, bool columnwise, const GroupedMatrixView& out,
                            const ExecContext& ctx);
  void (*update_delayed_scaling)(const DelayedScalingUpdate* sets, int count, int margin,
                                 AmaxAlgo algo, bool check_finite, const ExecContext& ctx);
};

// Installs `backend` (static storage) for a device type; a later call replaces
// it. Thread-safe.
void register_quantize_ops(DeviceType type, const QuantizeOpsBackend* backend);

// The CPU implementation (quantize_ops_cpu.cpp), always registered.
const QuantizeOpsBackend& cpu_quantize_ops();

// The CUDA implementation registers itself through this (cuda/quantize_ops_cuda.cu);
// defined only in builds with CUDA. Idempotent.
void register_cuda_quantize_ops();

}  // namespace grouped_linear::fp8
