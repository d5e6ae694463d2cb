// Delayed scaling's step boundary on CUDA: every set's scales from its amax
// history, then the history rolled, in one launch (per 256 sets) with the
// set descriptors as kernel arguments. A CTA owns up to 32 tensors' history
// columns, spread over its threads column-fastest (so row accesses are
// coalesced), and rolls the rows a chunk at a time from the oldest down.
// The same bits as update_delayed_scaling on the CPU.
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

// Threads a CTA: 1024 for long histories; 256 where every history of the
// launch has at most 64 rows, a few a thread either way, so that the CTA
// starts and merges sooner (on an H100, a module's two sets took 4.4-4.8 us
// with 1024 threads and 1-row histories, against 2.3-2.7 for the 256-thread
// kernel before this one).
constexpr int kLongHistoryThreads = 1024;
constexpr int kShortHistoryThreads = 256;
constexpr int64_t kShortHistoryRows = 64;
constexpr int kColumnsPerCta = 32;
constexpr int kRowsPerThread = 16;

// grid: (32-tensor column blocks, sets of the batch). A CTA's `width`
// columns (32, or what is left of the set) are spread over its threads
// column-fastest, so every thread works whatever the set's width: a
// module's backward set has one column, which with a lane per column left
// 31 of every 32 threads idle. Each column gets Threads / width row lanes.
//
// The roll writes rows 1 .. len-1 with the old rows 0 .. len-2: chunk by
// chunk from the top, each chunk's old rows are read into registers, then
// (after a barrier) written one row up. A chunk's writes never touch rows a
// later chunk reads, and a later chunk writes only after its own barrier,
// when this chunk's reads are done; so one barrier per chunk suffices. At
// 16 rows a thread a 1024-row history is one chunk for up to 16 columns,
// two for 32.
template <int Threads>
__global__ void __launch_bounds__(Threads)
    update_kernel(const __grid_constant__ SetBatch batch, int margin, bool use_max) {
  __shared__ float partial[Threads];
  const DelayedScalingUpdate& u = batch.set[blockIdx.y];
  const DelayedScalingGroup& s = u.group;
  const int64_t n = s.num_tensors, len = s.history_len;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kColumnsPerCta;
  if (first >= n) return;  // the whole CTA
  const int width = static_cast<int>(min(static_cast<int64_t>(kColumnsPerCta), n - first));
  const int lanes = Threads / width;  // row lanes per column
  const int col = static_cast<int>(threadIdx.x) % width;
  const int lane = static_cast<int>(threadIdx.x) / width;
  const bool active = lane < lanes;
  float* column = s.history + first + col;
  // Row 0, the newest amax, is read by lane 0 now (the roll never writes it)
  // rather than from row 1 after the last barrier, off the kernel's tail.
  const float newest = active && lane == 0 ? column[0] : 0.f;
  // merge_amax over the rows this thread reads; -inf is its identity.
  float a = bits_float(0xFF800000u);
  if (active && use_max && lane == 0 && len >= 2) a = column[(len - 1) * n];  // read by no chunk
  const int64_t row_step = static_cast<int64_t>(lanes) * n;  // between a thread's rows
  const int64_t chunk_rows = static_cast<int64_t>(lanes) * kRowsPerThread;
  for (int64_t hi = len; hi > 1; hi -= chunk_rows) {
    // This thread reads old rows top, top - lanes, ... and writes each one
    // row down (row + 1); rows below 0 are not there.
    const int64_t top = hi - 2 - lane;
    const int rows =
        active && top >= 0
            ? static_cast<int>(min(static_cast<int64_t>(kRowsPerThread), top / lanes + 1))
            : 0;
    const float* src = column + top * n;
    float v[kRowsPerThread];
    if (rows > 0) {
      // Every load first, each from a row that exists (the last one again
      // past `rows`), then the merges: loads under `j < rows` compiled to a
      // branch each, and every row waited for the one before (about 0.5 us
      // a row on an H100).
#pragma unroll
      for (int j = 0; j < kRowsPerThread; ++j) v[j] = src[-min(j, rows - 1) * row_step];
      if (use_max) {
#pragma unroll
        for (int j = 0; j < kRowsPerThread; ++j) a = j < rows ? merge_amax(a, v[j]) : a;
      }
    }
    __syncthreads();
    float* dst = column + (top + 1) * n;
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j)
      if (j < rows) dst[-j * row_step] = v[j];
  }
  // Each column's row lanes merge eight at a time: lane l takes lanes
  // l + stride .. l + 7 * stride (four barriers for 1024 lanes, not ten).
  // Only lanes 0 .. len - 2 read rows, and most_recent reads none of them:
  // the tree spans the lanes that hold an amax (none with one row).
  const int merged = use_max ? static_cast<int>(min(static_cast<int64_t>(lanes), len - 1)) : 0;
  partial[threadIdx.x] = a;
  for (int stride = 1; stride < merged; stride *= 8) {
    __syncthreads();
    if (active && lane % (8 * stride) == 0) {
      float m = partial[threadIdx.x];
      for (int r = 1; r < 8 && lane + r * stride < merged; ++r)
        m = merge_amax(m, partial[threadIdx.x + r * stride * width]);
      partial[threadIdx.x] = m;
    }
  }
  __syncthreads();  // also: every chunk has read row 0
  if (lane != 0) return;
  const int64_t t = first + col;
  const float amax = use_max ? merge_amax(newest, partial[threadIdx.x]) : newest;
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
  std::vector<int64_t> widest;   // tensors of the largest set in the batch
  std::vector<int64_t> longest;  // rows of the longest history in the batch
};

Batches make_batches(const DelayedScalingUpdate* sets, int count) {
  Batches b;
  for (int i = 0; i < count; ++i) {
    if (sets[i].group.num_tensors == 0) continue;
    if (b.index.empty() || b.index.back().size() == kSetsPerLaunch) {
      b.batches.emplace_back();
      b.index.emplace_back();
      b.widest.push_back(0);
      b.longest.push_back(0);
    }
    b.batches.back().set[b.index.back().size()] = sets[i];
    b.index.back().push_back(i);
    if (sets[i].group.num_tensors > b.widest.back()) b.widest.back() = sets[i].group.num_tensors;
    if (sets[i].group.history_len > b.longest.back()) b.longest.back() = sets[i].group.history_len;
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
    if (b.longest[i] <= kShortHistoryRows)
      update_kernel<kShortHistoryThreads>
          <<<grid, kShortHistoryThreads, 0, stream>>>(b.batches[i], margin, use_max);
    else
      update_kernel<kLongHistoryThreads>
          <<<grid, kLongHistoryThreads, 0, stream>>>(b.batches[i], margin, use_max);
    GL_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace grouped_linear::fp8::cuda_impl
