// Delayed scaling's step boundary on CUDA: every set's scales from its amax
// history, then the history rolled, in one launch (per 256 sets) with the
// set descriptors as kernel arguments. Each thread owns one tensor's
// history column, so the amax, the scale and the roll need no
// synchronisation. The same bits as update_delayed_scaling on the CPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/error.h"
#include "core/fp8/cuda/fp8_device.cuh"
#include "core/fp8/cuda/launch_util.h"
#include "core/fp8/cuda/quantize_ops_cuda.h"

namespace grouped_linear::fp8::cuda_impl {
namespace {

constexpr int kSetsPerLaunch = 256;  // 12 KiB of kernel arguments
constexpr int kThreads = 128;

struct SetBatch {
  DelayedScalingUpdate set[kSetsPerLaunch];
};

__device__ float history_amax(const DelayedScalingGroup& s, int64_t t, bool use_max) {
  float a = s.history[t];
  if (use_max)
    for (int64_t h = 1; h < s.history_len; ++h) a = merge_amax(a, s.history[h * s.num_tensors + t]);
  return a;
}

// grid: (tensor chunks, sets of the batch).
__global__ void __launch_bounds__(kThreads)
    update_kernel(const __grid_constant__ SetBatch batch, int margin, bool use_max) {
  const DelayedScalingUpdate& u = batch.set[blockIdx.y];
  const DelayedScalingGroup& s = u.group;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (t >= s.num_tensors) return;
  const int64_t n = s.num_tensors;
  const float scale =
      device_scale_from_amax(history_amax(s, t, use_max), u.fp8_max, margin, s.scale[t], false);
  s.scale[t] = scale;
  s.scale_inv[t] = host_recip(scale);
  for (int64_t h = s.history_len - 1; h >= 1; --h)
    s.history[h * n + t] = s.history[(h - 1) * n + t];
  s.history[t] = 0.f;
}

struct CheckResult {
  int found;
  int set;  // within the batch
  long long tensor;
  float amax;
};

// One CTA finds the first (set, tensor) of the batch whose amax is not finite.
__global__ void __launch_bounds__(kThreads)
    check_kernel(const __grid_constant__ SetBatch batch, int count, bool use_max,
                 CheckResult* out) {
  __shared__ unsigned long long first;
  for (int i = 0; i < count; ++i) {
    const DelayedScalingGroup& s = batch.set[i].group;
    if (threadIdx.x == 0) first = ~0ull;
    __syncthreads();
    for (int64_t t = threadIdx.x; t < s.num_tensors; t += kThreads)
      if (!is_finite(history_amax(s, t, use_max)))
        atomicMin(&first, static_cast<unsigned long long>(t));
    __syncthreads();
    if (first != ~0ull) {
      if (threadIdx.x == 0)
        *out = CheckResult{1, i, static_cast<long long>(first),
                           history_amax(s, static_cast<int64_t>(first), use_max)};
      return;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out->found = 0;
}

// The batches of at most kSetsPerLaunch sets with tensors, and each set's index.
struct Batches {
  std::vector<SetBatch> batches;
  std::vector<std::vector<int>> index;
  std::vector<int64_t> widest;  // tensors of the largest set in the batch
};

Batches make_batches(const DelayedScalingUpdate* sets, int count) {
  Batches b;
  for (int i = 0; i < count; ++i) {
    if (sets[i].group.num_tensors == 0) continue;
    if (b.index.empty() || b.index.back().size() == kSetsPerLaunch) {
      b.batches.emplace_back();
      b.index.emplace_back();
      b.widest.push_back(0);
    }
    b.batches.back().set[b.index.back().size()] = sets[i];
    b.index.back().push_back(i);
    if (sets[i].group.num_tensors > b.widest.back()) b.widest.back() = sets[i].group.num_tensors;
  }
  return b;
}

}  // namespace

void update_delayed_scaling_cuda(const DelayedScalingUpdate* sets, int count, int margin,
                                 AmaxAlgo algo, bool check_finite, const ExecContext& ctx) {
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  const bool use_max = algo == AmaxAlgo::kMax;
  const Batches b = make_batches(sets, count);
  if (b.batches.empty()) return;
  if (check_finite) {
    // Debug mode: every set is checked (one read back) before any is updated.
    CallWorkspace ws(ctx);
    auto* results = static_cast<CheckResult*>(ws.allocate(sizeof(CheckResult) * b.batches.size()));
    for (size_t i = 0; i < b.batches.size(); ++i) {
      check_kernel<<<1, kThreads, 0, stream>>>(b.batches[i], static_cast<int>(b.index[i].size()),
                                               use_max, results + i);
      GL_CUDA_CHECK_LAUNCH();
    }
    std::vector<CheckResult> host(b.batches.size());
    GL_CUDA_CHECK(cudaMemcpyAsync(host.data(), results, sizeof(CheckResult) * host.size(),
                                  cudaMemcpyDeviceToHost, stream));
    GL_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < host.size(); ++i)
      GL_CHECK_VALUE(!host[i].found, "amax of tensor ", host[i].tensor, " of set ",
                     b.index[i][static_cast<size_t>(host[i].set)], " is ", host[i].amax,
                     ", expected a finite value (an overflow or NaN upstream; scales unchanged)");
  }
  for (size_t i = 0; i < b.batches.size(); ++i) {
    const dim3 grid(static_cast<unsigned>((b.widest[i] + kThreads - 1) / kThreads),
                    static_cast<unsigned>(b.index[i].size()));
    update_kernel<<<grid, kThreads, 0, stream>>>(b.batches[i], margin, use_max);
    GL_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace grouped_linear::fp8::cuda_impl
