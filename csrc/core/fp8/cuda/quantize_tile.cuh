// One CTA quantizes one tile of up to 128 x 128 elements into the row-wise
// copy (codes in place) and the column-wise copy (codes transposed through
// shared memory, so both the reads and the writes are coalesced). The
// activation and the weight kernels (quantize_ops_cuda.cu) are loops over
// such tiles.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/fp8/cuda/fp8_device.cuh"

namespace grouped_linear::fp8::cuda_impl {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 128;                    // rows and columns of a tile
constexpr int kRowsPerWarp = kTile / kWarps;  // 16

// Where a tile's scales come from.
enum TileScaling : int {
  kUniform = 0,    // one given scale (per-tensor recipes)
  kPerRowCol = 1,  // 1 x 128 blocks: a scale per row (row-wise), per column (column-wise)
  kPerTile = 2,    // one 128 x 128 block: one scale for both copies
};

// Shared-memory row pitch (elements) of the staged tile: reading one column
// down 32 rows touches 32 different banks.
template <int K>
constexpr int tile_pitch() {
  return K == kInF32 ? kTile + 1 : kTile + 2;
}

template <int K>
constexpr size_t tile_bytes() {
  return static_cast<size_t>(kTile) * tile_pitch<K>() * sizeof(typename Storage<K>::type);
}

struct TileIO {
  const void* in;  // element (0, 0) of the tile
  int64_t in_stride;
  int nr, nc;        // rows and columns of the tile (<= 128)
  uint8_t* row_out;  // row-wise codes at (0, 0), or null
  int64_t row_stride;
  float* row_scale;          // kPerRowCol: row r's scale_inv at row_scale[r * row_scale_stride]
  int64_t row_scale_stride;  // kPerTile: the tile's scale_inv (row-wise copy), or null
  uint8_t* col_out;          // column-wise codes: element (r, c) at col_out[c * col_stride + r]
  int64_t col_stride;
  float* col_scale;  // like row_scale, per column
  int64_t col_scale_stride;
  int nr_pad;    // column-wise rows [nr, nr_pad) are written as zero padding
  bool vec_in;   // 4-element loads are aligned
  bool vec_out;  // 4-byte row-wise stores are aligned
};

// The amax of a row segment spread over the warp (4 values a lane; absent
// values are 0): NaN if any value is NaN, as quantize.h's amax().
__device__ __forceinline__ float warp_segment_amax(const float (&v)[4]) {
  uint32_t m = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) m = max(m, abs_bits(v[e]));
  return amax_from_abs_bits(warp_max_bits(m));
}

// A block's scale from its amax: quantize_blockwise's rule (margin 0, 1 when
// the amax is zero, infinite or NaN).
__device__ __forceinline__ float block_scale(float block_amax, float fp8_max, bool power_2) {
  return device_scale_from_amax(block_amax, fp8_max, 0, 1.f, power_2);
}

template <int K>
__device__ __forceinline__ void load4(const typename Storage<K>::type* src,
                                      typename Storage<K>::type (&raw)[4]) {
  if constexpr (K == kInF32) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(src));
    raw[0] = q.x, raw[1] = q.y, raw[2] = q.z, raw[3] = q.w;
  } else {
    const uint2 q = __ldg(reinterpret_cast<const uint2*>(src));
    raw[0] = static_cast<uint16_t>(q.x), raw[1] = static_cast<uint16_t>(q.x >> 16);
    raw[2] = static_cast<uint16_t>(q.y), raw[3] = static_cast<uint16_t>(q.y >> 16);
  }
}

// A 128 x 128 block's scale from the warps' folded segment amaxes: every
// thread gets it, thread 0 writes its scale_inv to whichever copies ask.
// The barrier also completes the staged tile.
__device__ __forceinline__ float tile_block_scale(float folded, float* scratch, float fp8_max,
                                                  bool power_2, const TileIO& io) {
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = folded;
  __syncthreads();
  float block_amax = 0.f;
  for (int w = 0; w < kWarps; ++w) block_amax = fold_block_amax(block_amax, scratch[w]);
  const float tile_scale = block_scale(block_amax, fp8_max, power_2);
  if (threadIdx.x == 0) {
    if (io.row_scale != nullptr) *io.row_scale = host_recip(tile_scale);
    if (io.col_scale != nullptr) *io.col_scale = host_recip(tile_scale);
  }
  return tile_scale;
}

// Four products v[e] * s[e] as FP8 codes, packed little-endian (byte e from
// v[e]), two conversions at a time. Only for products that need none of
// host_mul's NaN handling (plain_products): then they equal fp8x4's bits.
__device__ __forceinline__ uint32_t fp8x4_plain(const float (&v)[4], const float (&s)[4],
                                                Format format) {
  return device_to_fp8x2(__fmul_rn(v[0], s[0]), __fmul_rn(v[1], s[1]), format) |
         device_to_fp8x2(__fmul_rn(v[2], s[2]), __fmul_rn(v[3], s[3]), format) << 16;
}

// fp8x4_plain with one scale for all four values.
__device__ __forceinline__ uint32_t fp8x4_plain(const float (&v)[4], float s, Format format) {
  const float each[4] = {s, s, s, s};
  return fp8x4_plain(v, each, format);
}

// Four values times `s` as FP8 codes, packed little-endian (byte e from
// v[e]): device_to_fp8(host_mul(v[e], s)) each, two conversions at a time
// when none of the products needs host_mul's NaN handling (plain_products).
__device__ __forceinline__ uint32_t fp8x4(const float (&v)[4], float s, Format format) {
  uint32_t m = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) m = max(m, abs_bits(v[e]));
  if (plain_products(m, s)) return fp8x4_plain(v, s, format);
  uint32_t q = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e)
    q |= static_cast<uint32_t>(device_to_fp8(host_mul(v[e], s), format)) << (8 * e);
  return q;
}

// fp8x4 with a scale per value (the column-wise codes of 1 x 128 block
// scales, one scale per column): device_to_fp8(host_mul(v[e], s[e])) each.
__device__ __forceinline__ uint32_t fp8x4_scaled(const float (&v)[4], const float (&s)[4],
                                                 Format format) {
  bool plain = true;
#pragma unroll
  for (int e = 0; e < 4; ++e) plain = plain && plain_products(abs_bits(v[e]), s[e]);
  if (plain) return fp8x4_plain(v, s, format);
  uint32_t q = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e)
    q |= static_cast<uint32_t>(device_to_fp8(host_mul(v[e], s[e]), format)) << (8 * e);
  return q;
}

// Quantizes one tile. `scale` is the per-tensor scale (kUniform). With
// `track`, abs_bits of every element is maxed into amax_bits (see
// fp8_device.cuh; amax_from_abs_bits gives the amax); with `sums_on`,
// sums[e] accumulates this thread's column lane * 4 + e over its rows (the
// caller reduces over warps). `tile` (tile_bytes<K>() of shared memory) is
// needed when there is a column-wise copy or the scaling is kPerTile. Ends
// with a barrier when it used them: `tile` and `scratch` (kWarps floats) are
// free afterwards.
template <int K, int kScaling>
__device__ void quantize_tile(const TileIO& io, float scale, Format format, bool power_2,
                              typename Storage<K>::type* tile, float* scratch, bool track,
                              uint32_t& amax_bits, bool sums_on, float (&sums)[4]) {
  using S = typename Storage<K>::type;
  constexpr int kPitch = tile_pitch<K>();
  constexpr int kBatch = 4;  // rows a warp holds in registers at a time
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float fp8_max = format_info(format).max;
  const bool stage = io.col_out != nullptr || kScaling == kPerTile;
  const int c = lane * 4;
  // Columns present from this lane's first on (may be <= 0 or > 4). Kept
  // unclamped on purpose: ptxas before CUDA 13.4 can miscompile the
  // max(0, min(4, x)) clamp on sm_90 (a fused VIMNMX.RELU whose predicate was
  // taken as "4 present" for x == 0, storing past the row; see CCCL #11306).
  const int left = io.nc - c;
  const bool full = left >= 4;

  // Row-wise codes of one row from its values (4 per lane).
  auto store_row = [&](int r, const float (&v)[4], float s) {
    const uint32_t q = fp8x4(v, s, format);
    uint8_t* dst = io.row_out + r * io.row_stride + c;
    if (io.vec_out && full) {
      *reinterpret_cast<uint32_t*>(dst) = q;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (e < left) dst[e] = static_cast<uint8_t>(q >> (8 * e));
    }
  };

  // Warp w takes rows w, w + 8, ..., lane l columns 4l .. 4l + 3, a batch of
  // rows at a time (absent values read as 0).
  float folded = 0.f;  // kPerTile: this warp's rows' segment amaxes, folded
  for (int i0 = 0; i0 < kRowsPerWarp; i0 += kBatch) {
    float v[kBatch][4];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int r = warp + kWarps * (i0 + b);
#pragma unroll
      for (int e = 0; e < 4; ++e) v[b][e] = 0.f;
      if (r < io.nr && left > 0) {
        const S* src = static_cast<const S*>(io.in) + r * io.in_stride + c;
        S raw[4];
        if (io.vec_in && full) {
          load4<K>(src, raw);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) raw[e] = e < left ? src[e] : S(0);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (e < left) {
            v[b][e] = widen<K>(raw[e]);
            if (stage) tile[r * kPitch + c + e] = raw[e];
          }
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int r = warp + kWarps * (i0 + b);
      if (track)
#pragma unroll
        for (int e = 0; e < 4; ++e) amax_bits = max(amax_bits, abs_bits(v[b][e]));
      if (sums_on)
#pragma unroll
        for (int e = 0; e < 4; ++e) sums[e] += v[b][e];
      if (r >= io.nr) continue;  // warp-uniform
      if constexpr (kScaling == kPerTile) {
        // quantize_blockwise folds its rows' segment amaxes in any order.
        folded = fold_block_amax(folded, warp_segment_amax(v[b]));
      } else if (io.row_out != nullptr) {
        float s = scale;
        if constexpr (kScaling == kPerRowCol) {
          s = block_scale(fold_block_amax(0.f, warp_segment_amax(v[b])), fp8_max, power_2);
          if (lane == 0) io.row_scale[r * io.row_scale_stride] = host_recip(s);
        }
        store_row(r, v[b], s);
      }
    }
  }

  float tile_scale = scale;
  if constexpr (kScaling == kPerTile) {
    tile_scale = tile_block_scale(folded, scratch, fp8_max, power_2, io);
    if (io.row_out != nullptr)
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const int r = warp + kWarps * i;
        if (r >= io.nr) break;
        float v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = e < left ? widen<K>(tile[r * kPitch + c + e]) : 0.f;
        store_row(r, v, tile_scale);
      }
  }

  if (io.col_out != nullptr) {
    __syncthreads();
    // Warp w takes columns w, w + 8, ...; lane l rows l, l + 32, l + 64, l + 96,
    // so each store instruction writes 32 consecutive bytes of one column-wise row.
    for (int k = 0; k < kTile / kWarps; ++k) {
      const int cc = warp + kWarps * k;
      if (cc >= io.nc) break;  // warp-uniform
      float x[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = lane + 32 * q;
        x[q] = r < io.nr ? widen<K>(tile[r * kPitch + cc]) : 0.f;
      }
      float s = tile_scale;
      if constexpr (kScaling == kPerRowCol) {
        s = block_scale(fold_block_amax(0.f, warp_segment_amax(x)), fp8_max, power_2);
        if (lane == 0) io.col_scale[cc * io.col_scale_stride] = host_recip(s);
      }
      uint8_t* dst = io.col_out + cc * io.col_stride;
      const uint32_t codes = fp8x4(x, s, format);  // absent rows hold 0: never NaN
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = lane + 32 * q;
        if (r < io.nr)
          dst[r] = static_cast<uint8_t>(codes >> (8 * q));
        else if (r < io.nr_pad)
          dst[r] = 0;
      }
    }
  }
  if (stage) __syncthreads();  // `stage` is the same in every thread of the CTA
}

// Merges every thread's amax_bits (the CTA's maximum) into *target with one
// atomic merge, then clears amax_bits. Every thread of the CTA calls it;
// `scratch` (kWarps floats) is free again on return.
__device__ __forceinline__ void merge_cta_amax(uint32_t& amax_bits, float* scratch, float* target) {
  const float a = amax_from_abs_bits(warp_max_bits(amax_bits));
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = a;
  __syncthreads();
  float total = 0.f;
  if (threadIdx.x == 0)
    for (int w = 0; w < kWarps; ++w) total = merge_amax(total, scratch[w]);
  __syncthreads();
  if (threadIdx.x == 0) atomic_merge_amax(target, total);
  amax_bits = 0;
}

// Whether quantize_full_tile can take a tile: a full 128 x 128 tile of
// 16-bit values whose rows start 16-byte aligned (8 elements), row-wise codes
// 8-byte aligned and column-wise codes 4-byte aligned. The weight kernel
// checks the pointers and strides once per launch (`aligned`), the size per
// tile.
__device__ __forceinline__ bool full_tile(const TileIO& io, bool aligned) {
  return aligned && io.nr == kTile && io.nc == kTile && io.nr_pad == kTile;
}

// Activations also take the wide paths with fewer rows (a group's last row
// tile): 128 columns, any rows, the same alignment.
__device__ __forceinline__ bool wide_rows_tile(const TileIO& io, bool aligned) {
  return aligned && io.nc == kTile && io.nr > 0;
}

// The FP8 codes of a full tile, staged for the column-wise copy: 128 rows of
// 128 bytes, 33 words a row so that both the row-wise writes and the
// transposing reads below hit 32 different banks.
constexpr int kCodePitchWords = kTile / 4 + 1;
constexpr size_t kCodeTileBytes = static_cast<size_t>(kTile) * kCodePitchWords * 4;
static_assert(kCodeTileBytes <= tile_bytes<kInBF16>(), "the code tile aliases the value tile");

// Rows r .. r + 3 of 4 columns (word q = row r + q, byte e = column e) as
// columns: word e of the result holds column e's 4 rows, byte q = row r + q.
__device__ __forceinline__ void transpose_4x4_bytes(const uint32_t (&rows)[4],
                                                    uint32_t (&cols)[4]) {
  const uint32_t lo01 = __byte_perm(rows[0], rows[1], 0x5140);  // r0c0 r1c0 r0c1 r1c1
  const uint32_t hi01 = __byte_perm(rows[0], rows[1], 0x7362);  // r0c2 r1c2 r0c3 r1c3
  const uint32_t lo23 = __byte_perm(rows[2], rows[3], 0x5140);
  const uint32_t hi23 = __byte_perm(rows[2], rows[3], 0x7362);
  cols[0] = __byte_perm(lo01, lo23, 0x5410);
  cols[1] = __byte_perm(lo01, lo23, 0x7632);
  cols[2] = __byte_perm(hi01, hi23, 0x5410);
  cols[3] = __byte_perm(hi01, hi23, 0x7632);
}

// The column-wise copy of a tile from its codes staged row-major in
// `code_tile` (kCodePitchWords words a row): lane 8a + b reads rows
// 32s + 4b .. 32s + 4b + 3 of code word 4wg + a (columns 16wg + 4a .. + 3)
// and stores each column's 4 bytes: 8 lanes write 32 consecutive bytes of
// one column-wise row, 4 such sectors a store. Units (wg, s): 8 x 4, 4 a
// warp. Rows from nr_pad on (a multiple of 16) are not written; kAllRows:
// nr_pad is 128.
template <bool kAllRows>
__device__ __forceinline__ void write_columnwise_codes(const TileIO& io,
                                                       const uint32_t* code_tile) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nr_pad = io.nr_pad;
  const int a = lane >> 3, b = lane & 7;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int unit = warp + kWarps * k;
    const int word = 4 * (unit & 7) + a, r = 32 * (unit >> 3) + 4 * b;
    uint32_t rows[4], cols[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) rows[q] = code_tile[(r + q) * kCodePitchWords + word];
    transpose_4x4_bytes(rows, cols);
    if (kAllRows || r < nr_pad)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        *reinterpret_cast<uint32_t*>(io.col_out + (4 * word + e) * io.col_stride + r) = cols[e];
  }
}

// quantize_tile for a tile of 128 columns of 16-bit values (kUniform or
// kPerTile; kPerTile, the weights', full tiles only), with wider memory
// operations: 16-byte loads (8 elements a lane, a half-warp per row, 4 rows
// a lane in flight) and 8-byte row-wise stores. Rows [nr, 128) read as 0
// (their codes are 0): the column-wise copy gets zeros for rows [nr, nr_pad)
// and nothing after, as in quantize_tile. kAllRows: nr and nr_pad are 128,
// known at compile time, so full tiles (all of the weights', most of the
// activations') run the instructions they ran before partial tiles came
// here, without row checks. Both weight
// scalings give the two copies one scale, so the column-wise codes are the
// row-wise codes transposed: they are converted once, staged as bytes
// (aliasing `tile`, whose values kPerTile reads into registers first) and
// transposed 4 x 4 bytes at a time, where quantize_tile converts every
// element twice and stores one byte a lane. The same codes, scales and amax
// bits as quantize_tile: the conversions are the same and the maxima are
// order-free.
template <int K, int kScaling, bool kAllRows>
__device__ void quantize_full_tile(const TileIO& io, float scale, Format format, bool power_2,
                                   uint16_t* tile, float* scratch, bool track,
                                   uint32_t& amax_bits) {
  static_assert(K == kInBF16 || K == kInF16, "16-bit inputs only");
  static_assert(kScaling == kUniform || kScaling == kPerTile, "weight scalings only");
  static_assert(kAllRows || kScaling == kUniform, "128 x 128 blocks are whole tiles");
  constexpr int kPitch = tile_pitch<K>();
  constexpr int kRows = kTile / (2 * kWarps);  // 8 rows a thread
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nr = io.nr;  // 128 where kAllRows (the checks below then compile away)
  const int half = lane >> 4, c = (lane & 15) * 8;
  const float fp8_max = format_info(format).max;
  const bool codes_staged = io.col_out != nullptr;
  const uint16_t* in = static_cast<const uint16_t*>(io.in);
  uint32_t* code_tile = reinterpret_cast<uint32_t*>(tile);
  auto row_of = [&](int i) { return 2 * warp + half + 16 * i; };

  auto widen8 = [](const uint32_t (&w)[4], float (&v)[8]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[2 * e] = widen<K>(static_cast<uint16_t>(w[e]));
      v[2 * e + 1] = widen<K>(static_cast<uint16_t>(w[e] >> 16));
    }
  };
  // Row r's 8 codes from this thread's columns: to the row-wise copy and,
  // for the column-wise one, to the code tile.
  auto emit_row = [&](int r, const float (&v)[8], float s) {
    const float lo[4] = {v[0], v[1], v[2], v[3]}, hi[4] = {v[4], v[5], v[6], v[7]};
    const uint2 q = make_uint2(fp8x4(lo, s, format), fp8x4(hi, s, format));
    if (io.row_out != nullptr && (kAllRows || r < nr))
      *reinterpret_cast<uint2*>(io.row_out + r * io.row_stride + c) = q;
    if (codes_staged) {
      code_tile[r * kCodePitchWords + c / 4] = q.x;
      code_tile[r * kCodePitchWords + c / 4 + 1] = q.y;
    }
  };

  // Thread (warp, half) takes rows 2 * warp + half + 16 * i, i = 0 .. 7,
  // four 16-byte loads in flight at a time. Eight at once or an L2 bulk
  // prefetch of a CTA's next tile made the weight cast slower on an H100
  // (2.58-2.65 and 1.89-1.97 TB/s against 2.67-2.73); two code tiles (one
  // barrier a tile) and 16-byte column-wise stores made it no faster
  // (benchmarks/h100-2026-12-06-cast-prefetch-ab.txt,
  // -weight-cast-barrier-ab.txt, -cast-wide-column-stores-ab.txt).
  float folded = 0.f;  // kPerTile: this thread's rows' segment amaxes, folded
  for (int i0 = 0; i0 < kRows; i0 += 4) {
    uint4 raw[4];
#pragma unroll
    for (int b = 0; b < 4; ++b)
      raw[b] = kAllRows || row_of(i0 + b) < nr
                   ? __ldg(reinterpret_cast<const uint4*>(in + row_of(i0 + b) * io.in_stride + c))
                   : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int r = row_of(i0 + b);
      const uint32_t w[4] = {raw[b].x, raw[b].y, raw[b].z, raw[b].w};
      float v[8];
      widen8(w, v);
      uint32_t m = 0;
#pragma unroll
      for (int e = 0; e < 8; ++e) m = max(m, abs_bits(v[e]));
      if (track) amax_bits = max(amax_bits, m);
      if constexpr (kScaling == kPerTile) {
        // The block's scale needs every row first: stage the values.
        uint32_t* dst = reinterpret_cast<uint32_t*>(tile + r * kPitch + c);
#pragma unroll
        for (int e = 0; e < 4; ++e) dst[e] = w[e];
        // The row's segment amax over its half-warp, as warp_segment_amax.
#pragma unroll
        for (int offset = 8; offset > 0; offset /= 2)
          m = max(m, __shfl_xor_sync(0xffffffffu, m, offset));
        folded = fold_block_amax(folded, amax_from_abs_bits(m));
      } else {
        emit_row(r, v, scale);
      }
    }
  }

  if constexpr (kScaling == kPerTile) {
    // Folded amaxes are never NaN (a NaN segment drops out), so the two
    // halves and the warps combine in any order.
    folded = fold_block_amax(folded, __shfl_xor_sync(0xffffffffu, folded, 16));
    const float tile_scale = tile_block_scale(folded, scratch, fp8_max, power_2, io);
    if (io.row_out != nullptr || codes_staged) {
      uint32_t staged[kRows][4];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const uint32_t* src = reinterpret_cast<const uint32_t*>(tile + row_of(i) * kPitch + c);
#pragma unroll
        for (int e = 0; e < 4; ++e) staged[i][e] = src[e];
      }
      if (codes_staged) __syncthreads();  // the code tile overwrites the values
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        float v[8];
        widen8(staged[i], v);
        emit_row(row_of(i), v, tile_scale);
      }
    }
  }

  if (codes_staged) {
    __syncthreads();
    write_columnwise_codes<kAllRows>(io, code_tile);
  }
  if (codes_staged || kScaling == kPerTile) __syncthreads();
}

// |x|'s 16-bit pattern (sign cleared) as abs_bits of x widened to float.
// Both 16-bit formats order their magnitudes like their bit patterns, NaN
// above infinity, and widening keeps that order, so a maximum taken on the
// 16-bit patterns is the maximum abs_bits would give.
template <int K>
__device__ __forceinline__ uint32_t abs_bits_of_half_pattern(uint32_t h) {
  if constexpr (K == kInBF16)
    return h << 16;
  else
    return abs_bits(fp16_bits_to_float(h));
}

// Per-halfword unsigned maximum of two words of 16-bit patterns (one
// instruction on sm_90).
__device__ __forceinline__ uint32_t max_u16x2(uint32_t a, uint32_t b) { return __vmaxu2(a, b); }

// quantize_tile for 1 x 128 block scales (kPerRowCol) on a tile of 128
// columns of 16-bit activations and any number of rows, with
// quantize_full_tile's memory operations. A row's scale comes from its 128
// values (a half-warp's), a column's from the tile's rows, so the two
// copies' codes differ and every value is converted twice, as in
// quantize_tile. A thread takes 8 rows x 8 columns (all 8 loads in flight).
// The cast is bound by its instructions as much as by memory (an H100 ran
// the per-element version at 0.6 of its issue slots and half the DRAM
// bandwidth of the per-tensor cast), so the work per element is kept small:
//  - maxima on the 16-bit patterns, two values an instruction, with no
//    widening (abs_bits_of_half_pattern);
//  - a half-warp's 8 row maxima reduced with 8 shuffles instead of 32, each
//    row's scale computed by one lane pair instead of all 16 lanes, and
//    broadcast;
//  - whether a row's (column's) products need host_mul's NaN handling
//    (plain_products) decided once from its maximum: a plain row takes two
//    conversions an instruction without per-value checks, any other row
//    fp8x4's per-value path, which gives plain values the same bits.
// The column maxima meet in shared memory, and the column-wise pass reads
// the thread's values again (from L1 or L2: holding them in registers
// across the barriers spills the fp16 variants at 3 CTAs an SM); its codes
// are staged as bytes and leave through write_columnwise_codes, 4 bytes a
// lane, instead of one. Rows [nr, 128) read as 0, as in quantize_tile. Uses
// kBlockwiseTileBytes of `smem`; ends with a barrier when it used it. The
// same codes and scales as quantize_tile (the C++ and Python FP8 tests
// compare them with the CPU's bits).
constexpr size_t kColumnBitsOffset = kCodeTileBytes;  // [kWarps][kTile / 2] packed maxima
constexpr size_t kColumnScaleOffset = kColumnBitsOffset + sizeof(uint32_t) * kWarps * kTile / 2;
constexpr size_t kColumnPlainOffset = kColumnScaleOffset + sizeof(float) * kTile;
constexpr size_t kBlockwiseTileBytes = kColumnPlainOffset + sizeof(uint32_t) * kTile / 32;
static_assert(kBlockwiseTileBytes <= tile_bytes<kInBF16>(), "fits the value tile's memory");

template <int K>
__device__ void quantize_wide_tile_blockwise(const TileIO& io, Format format, bool power_2,
                                             unsigned char* smem) {
  static_assert(K == kInBF16 || K == kInF16, "16-bit inputs only");
  constexpr int kRows = kTile / (2 * kWarps);  // 8 rows a thread
  constexpr unsigned kFull = 0xffffffffu;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int half = lane >> 4, c = (lane & 15) * 8;
  const float fp8_max = format_info(format).max;
  const uint16_t* in = static_cast<const uint16_t*>(io.in);
  auto row_of = [&](int i) { return 2 * warp + half + 16 * i; };
  auto widen8 = [](const uint4& w, float (&v)[8]) {
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[2 * e] = widen<K>(static_cast<uint16_t>(words[e]));
      v[2 * e + 1] = widen<K>(static_cast<uint16_t>(words[e] >> 16));
    }
  };

  // Thread (warp, half) takes rows 2 * warp + half + 16 * i, i = 0 .. 7.
  // `again`: a load the compiler may not merge with the first pass's.
  auto load_rows = [&](uint4(&raw)[kRows], bool again) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      raw[i] = make_uint4(0u, 0u, 0u, 0u);
      if (row_of(i) >= io.nr) continue;
      const uint16_t* src = in + row_of(i) * io.in_stride + c;
      if (again)
        asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(raw[i].x), "=r"(raw[i].y), "=r"(raw[i].z), "=r"(raw[i].w)
                     : "l"(src));
      else
        raw[i] = __ldg(reinterpret_cast<const uint4*>(src));
    }
  };
  uint4 raw[kRows];
  load_rows(raw, false);

  // The maxima of |x| as 16-bit patterns: per row over this thread's 8
  // values, per column pair (word e: columns c + 2e, c + 2e + 1) over its 8 rows.
  uint32_t row_max[kRows];
  uint32_t column_words[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const uint32_t a[4] = {raw[i].x & 0x7fff7fffu, raw[i].y & 0x7fff7fffu, raw[i].z & 0x7fff7fffu,
                           raw[i].w & 0x7fff7fffu};
#pragma unroll
    for (int e = 0; e < 4; ++e) column_words[e] = max_u16x2(column_words[e], a[e]);
    const uint32_t m = max_u16x2(max_u16x2(a[0], a[1]), max_u16x2(a[2], a[3]));
    row_max[i] = max(m & 0xffffu, m >> 16);
  }

  // Each row's maximum over its half-warp, scattered while reduced: after
  // the exchanges with lanes 8, 4, 2 and 1 apart, lanes 2j and 2j + 1 of a
  // half hold row j's (row_of(j)) maximum.
  const bool up8 = lane & 8, up4 = lane & 4, up2 = lane & 2;
  uint32_t four[4], two[2];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t send = up8 ? row_max[q] : row_max[q + 4];
    const uint32_t keep = up8 ? row_max[q + 4] : row_max[q];
    four[q] = max(keep, __shfl_xor_sync(kFull, send, 8));
  }
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const uint32_t send = up4 ? four[q] : four[q + 2];
    const uint32_t keep = up4 ? four[q + 2] : four[q];
    two[q] = max(keep, __shfl_xor_sync(kFull, send, 4));
  }
  uint32_t own = max(up2 ? two[1] : two[0], __shfl_xor_sync(kFull, up2 ? two[0] : two[1], 2));
  own = max(own, __shfl_xor_sync(kFull, own, 1));

  // Row (lane & 15) / 2's scale, its scale_inv (written by the even lane),
  // and whether its products are plain.
  const uint32_t own_bits = abs_bits_of_half_pattern<K>(own);
  const float own_scale =
      block_scale(fold_block_amax(0.f, amax_from_abs_bits(own_bits)), fp8_max, power_2);
  const unsigned plain_rows = __ballot_sync(kFull, plain_products(own_bits, own_scale));
  const int own_row = row_of((lane & 15) >> 1);
  if (io.row_out != nullptr && (lane & 1) == 0 && own_row < io.nr)
    io.row_scale[own_row * io.row_scale_stride] = host_recip(own_scale);

  // Row-wise codes.
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int owner = 16 * half + 2 * i;
    const float s = __shfl_sync(kFull, own_scale, owner);
    const int r = row_of(i);
    if (io.row_out != nullptr && r < io.nr) {  // the same in the half-warp
      float v[8];
      widen8(raw[i], v);
      const float lo[4] = {v[0], v[1], v[2], v[3]}, hi[4] = {v[4], v[5], v[6], v[7]};
      uint2 q;
      if ((plain_rows >> owner) & 1u) {
        q = make_uint2(fp8x4_plain(lo, s, format), fp8x4_plain(hi, s, format));
      } else {
        q = make_uint2(fp8x4(lo, s, format), fp8x4(hi, s, format));
      }
      *reinterpret_cast<uint2*>(io.row_out + r * io.row_stride + c) = q;
    }
  }
  if (io.col_out == nullptr) return;  // the same in every thread

  // Column-wise: the maxima of the two halves, then of the 8 warps.
  uint32_t* code_tile = reinterpret_cast<uint32_t*>(smem);
  uint32_t* warp_column_words = reinterpret_cast<uint32_t*>(smem + kColumnBitsOffset);
  float* column_scale = reinterpret_cast<float*>(smem + kColumnScaleOffset);
  uint32_t* column_plain = reinterpret_cast<uint32_t*>(smem + kColumnPlainOffset);
#pragma unroll
  for (int e = 0; e < 4; ++e)
    column_words[e] = max_u16x2(column_words[e], __shfl_xor_sync(kFull, column_words[e], 16));
  if (half == 0)
    *reinterpret_cast<uint4*>(warp_column_words + warp * (kTile / 2) + c / 2) =
        make_uint4(column_words[0], column_words[1], column_words[2], column_words[3]);
  __syncthreads();
  if (threadIdx.x < kTile) {  // warps 0 .. 3, whole
    const int j = threadIdx.x;
    uint32_t m = 0;
    for (int w = 0; w < kWarps; ++w) {
      const uint32_t word = warp_column_words[w * (kTile / 2) + j / 2];
      m = max(m, (j & 1) ? word >> 16 : word & 0xffffu);
    }
    const uint32_t bits = abs_bits_of_half_pattern<K>(m);
    const float s = block_scale(fold_block_amax(0.f, amax_from_abs_bits(bits)), fp8_max, power_2);
    column_scale[j] = s;
    io.col_scale[j * io.col_scale_stride] = host_recip(s);
    const unsigned plain = __ballot_sync(kFull, plain_products(bits, s));
    if (lane == 0) column_plain[warp] = plain;
  }
  __syncthreads();
  load_rows(raw, true);
  float lo_scale[4], hi_scale[4];
#pragma unroll
  for (int e = 0; e < 4; ++e)
    lo_scale[e] = column_scale[c + e], hi_scale[e] = column_scale[c + 4 + e];
  const bool plain_columns = ((column_plain[c >> 5] >> (c & 31)) & 0xffu) == 0xffu;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int r = row_of(i);
    float v[8];
    widen8(raw[i], v);
    const float lo[4] = {v[0], v[1], v[2], v[3]}, hi[4] = {v[4], v[5], v[6], v[7]};
    code_tile[r * kCodePitchWords + c / 4] =
        plain_columns ? fp8x4_plain(lo, lo_scale, format) : fp8x4_scaled(lo, lo_scale, format);
    code_tile[r * kCodePitchWords + c / 4 + 1] =
        plain_columns ? fp8x4_plain(hi, hi_scale, format) : fp8x4_scaled(hi, hi_scale, format);
  }
  __syncthreads();
  write_columnwise_codes<false>(io, code_tile);
  __syncthreads();
}

}  // namespace grouped_linear::fp8::cuda_impl
