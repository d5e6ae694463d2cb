// Group sizes -> each group's place in the FP8 layouts, computed by every
// CTA of a kernel at its start (a block-wide scan; G up to a few thousand),
// so device sizes are never copied to the host. Sizes are clamped as
// core/cuda/group_kernels.cu clamps them: negative -> 0, rows past T dropped.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/fp8/fp8_tensor.h"

namespace grouped_linear::fp8::cuda_impl {

// Host sizes travel as kernel arguments up to this many groups.
constexpr int kHostSizeCapacity = 1024;

struct HostSizes {
  int32_t size[kHostSizeCapacity];  // validated: 0 <= size <= T < 2^31
  __device__ int64_t get(int g) const { return size[g]; }
};

struct DeviceSizes {
  const void* sizes;
  bool int64;
  __device__ int64_t get(int g) const {
    return int64 ? static_cast<const int64_t*>(sizes)[g] : static_cast<const int32_t*>(sizes)[g];
  }
};

// Prefix tables in shared memory, G + 1 entries each (entry G: the totals).
struct GroupTables {
  int32_t* row;     // first row of group g in [T, C]
  int32_t* column;  // first column in the column-wise copy: Σ round_up(m_j, kGroupAlign)
  int32_t* block;   // first 128-row block (column-wise scale column): Σ ceil(m_j / 128)
};

__host__ __device__ inline size_t group_tables_bytes(int64_t groups) {
  return (3 * static_cast<size_t>(groups + 1) * sizeof(int32_t) + 15) / 16 * 16;
}

// Columns group of m rows takes in a column-wise copy (fp8_tensor.h).
template <class Int>
__host__ __device__ constexpr Int aligned_columns(Int m) {
  constexpr Int kAlign = static_cast<Int>(kGroupAlign);
  return (m + kAlign - 1) / kAlign * kAlign;
}

__device__ inline GroupTables group_tables_at(void* smem, int groups) {
  int32_t* base = static_cast<int32_t*>(smem);
  return GroupTables{base, base + groups + 1, base + 2 * (groups + 1)};
}

__device__ inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Exclusive prefix of one value per thread over the block; *total = the sum.
// `scratch` holds one entry per warp. Every thread must call it.
template <int kThreads>
__device__ int64_t block_exclusive_scan(int64_t value, int64_t* scratch, int64_t* total) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int64_t inclusive = value;
  for (int offset = 1; offset < 32; offset *= 2) {
    const int64_t other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  int64_t before = 0, sum = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += scratch[w];
    sum += scratch[w];
  }
  __syncthreads();  // scratch may be reused
  *total = sum;
  return before + inclusive - value;
}

// Fills `t` for `groups` sizes over `total_rows` rows; ends with a barrier.
// Each thread takes a contiguous run of groups.
template <int kThreads, typename Sizes>
__device__ void build_group_tables(const Sizes& sizes, int groups, int64_t total_rows,
                                   const GroupTables& t, int64_t* scratch) {
  const int per = (groups + kThreads - 1) / kThreads;
  const int g0 = min(groups, static_cast<int>(threadIdx.x) * per);
  const int g1 = min(groups, g0 + per);
  auto clamped = [&](int g) {
    const int64_t s = sizes.get(g);
    return s < 0 ? int64_t{0} : (s > total_rows ? total_rows : s);
  };
  int64_t local = 0;
  for (int g = g0; g < g1; ++g) local += clamped(g);
  int64_t all_rows = 0;
  const int64_t first = block_exclusive_scan<kThreads>(local, scratch, &all_rows);
  // Column offsets and block counts, packed into one scan: the block sum
  // stays below 2^32, so it never carries into the column sum.
  int64_t packed = 0;
  int64_t p = first;
  for (int g = g0; g < g1; ++g) {
    const int64_t s = clamped(g);
    const int64_t begin = min64(p, total_rows), end = min64(p + s, total_rows);
    p += s;
    const int64_t m = end - begin;
    packed += (aligned_columns(m) << 32) + (m + 127) / 128;
  }
  int64_t packed_total = 0;
  int64_t q = block_exclusive_scan<kThreads>(packed, scratch, &packed_total);
  p = first;
  for (int g = g0; g < g1; ++g) {
    const int64_t s = clamped(g);
    const int64_t begin = min64(p, total_rows), end = min64(p + s, total_rows);
    p += s;
    const int64_t m = end - begin;
    t.row[g] = static_cast<int32_t>(begin);
    t.column[g] = static_cast<int32_t>(q >> 32);
    t.block[g] = static_cast<int32_t>(q & 0xffffffff);
    q += (aligned_columns(m) << 32) + (m + 127) / 128;
  }
  if (threadIdx.x == 0) {
    t.row[groups] = static_cast<int32_t>(min64(all_rows, total_rows));
    t.column[groups] = static_cast<int32_t>(packed_total >> 32);
    t.block[groups] = static_cast<int32_t>(packed_total & 0xffffffff);
  }
  __syncthreads();
}

// The g with prefix[g] <= value < prefix[g + 1] (value < prefix[groups]):
// the non-empty group holding `value`.
__device__ inline int find_group(const int32_t* prefix, int groups, int64_t value) {
  int lo = 0, hi = groups;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (prefix[mid] <= value)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

}  // namespace grouped_linear::fp8::cuda_impl
