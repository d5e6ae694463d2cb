// Delayed scaling's step boundary on CUDA: every set's scales from its amax
// history, then the history rolled, in one launch (per 256 sets) with the
// set descriptors as kernel arguments. A CTA owns 32 tensors' history
// columns (a lane each, so every row access is coalesced) and its warps
// share the rows, a chunk at a time from the oldest row down. The same bits
// as update_delayed_scaling on the CPU.
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

constexpr int kUpdateThreads = 256;
constexpr int kUpdateWarps = kUpdateThreads / 32;
constexpr int kColumnsPerCta = 32;
// Loads a thread has in flight per chunk. A set with few tensors gets one or
// two CTAs for the whole GPU, so the roll is bound by memory latency, not
// bandwidth: each chunk costs about one round trip, and 64 rows a thread
// (a 512-row chunk, 64 KiB in flight per CTA) roll a 1024-row history in two
// chunks where 16 rows a thread took eight.
constexpr int kRowsPerThread = 64;
constexpr int kChunkRows = kUpdateWarps * kRowsPerThread;

// grid: (32-tensor column blocks, sets of the batch). The roll writes rows
// 1 .. len-1 with the old rows 0 .. len-2: chunk by chunk from the top, each
// chunk's old rows are read into registers, then (after a barrier) written
// one row up. A chunk's writes never touch rows a later chunk reads, and a
// later chunk writes only after its own barrier, when this chunk's reads are
// done; so one barrier per chunk suffices. (One thread per column walking
// its 1024-row history, each load waiting on the previous store, took about
// 140 us for a module's two sets on an H200; 128-row chunks took about 60.)
__global__ void __launch_bounds__(kUpdateThreads)
    update_kernel(const __grid_constant__ SetBatch batch, int margin, bool use_max) {
  __shared__ float partial[kUpdateWarps][kColumnsPerCta];
  const DelayedScalingUpdate& u = batch.set[blockIdx.y];
  const DelayedScalingGroup& s = u.group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = s.num_tensors, len = s.history_len;
  if (static_cast<int64_t>(blockIdx.x) * kColumnsPerCta >= n) return;  // the whole CTA
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kColumnsPerCta + lane;
  const bool present = t < n;
  float* column = s.history + t;
  // merge_amax over the rows this thread reads; -inf is its identity.
  float a = bits_float(0xFF800000u);
  if (present && use_max && warp == 0 && len >= 2) a = column[(len - 1) * n];  // read by no chunk
  const int64_t row_step = static_cast<int64_t>(kUpdateWarps) * n;  // between a thread's rows
  for (int64_t hi = len; hi > 1; hi -= kChunkRows) {
    // This thread reads old rows top, top - 8, ... and writes each one row
    // down (row + 1); rows below 0 are not there.
    const int64_t top = hi - 2 - warp;
    const int rows =
        present && top >= 0
            ? static_cast<int>(min(static_cast<int64_t>(kRowsPerThread), top / kUpdateWarps + 1))
            : 0;
    const float* src = column + top * n;
    float v[kRowsPerThread];
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) {
      v[j] = j < rows ? src[-j * row_step] : 0.f;
      if (j < rows && use_max) a = merge_amax(a, v[j]);
    }
    __syncthreads();
    float* dst = column + (top + 1) * n;
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j)
      if (j < rows) dst[-j * row_step] = v[j];
  }
  partial[warp][lane] = a;
  __syncthreads();  // also: every chunk has read row 0
  if (warp != 0 || !present) return;
  // Row 0 is the newest amax (with len == 1, the only one); the rolled
  // history has already moved it to row 1.
  const float newest = len >= 2 ? column[n] : column[0];
  float amax = newest;
  if (use_max)
    for (int w = 0; w < kUpdateWarps; ++w) amax = merge_amax(amax, partial[w][lane]);
  const float scale = device_scale_from_amax(amax, u.fp8_max, margin, s.scale[t], false);
  s.scale[t] = scale;
  s.scale_inv[t] = host_recip(scale);
  column[0] = 0.f;
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
    const dim3 grid(static_cast<unsigned>((b.widest[i] + kColumnsPerCta - 1) / kColumnsPerCta),
                    static_cast<unsigned>(b.index[i].size()));
    update_kernel<<<grid, kUpdateThreads, 0, stream>>>(b.batches[i], margin, use_max);
    GL_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace grouped_linear::fp8::cuda_impl
