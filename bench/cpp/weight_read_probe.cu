// DRAM bandwidth of reading expert weights the way the grouped forward does,
// against the same bytes laid out so that each tile's k-block is contiguous.
//
//   weight_read_probe [--reps N] [--stages S] [--pace-cycles C]
//                     [--engine cp_async|tma] [--l2-promotion 0|64|128|256]
//                     [--readers 1|2] [--lag L] [--prefetch P]
//
// At 32-128 experts the FP8 forward streams every expert's weight from
// memory once and reaches 69-76% of an H100's peak DRAM bandwidth
// (benchmarks/reading.md). Its producer loads one 256-row x 128-byte box of
// W[g] per k-block: 256 runs of 128 bytes, K bytes apart. This probe reads
// G x N x K bytes with the same walk and nothing else (no MMAs, no A
// operand, no stores), so what it reaches is what that access pattern
// allows. Walks:
//  - "boxes": the forward's. A CTA (one an SM) takes tiles (group, 256-row
//    slice of N) in turn, two neighbouring CTAs per tile as the two 128-row
//    tiles of a 256-row group do (the second read mostly hits L2), and
//    streams each tile's k-block boxes through S shared-memory stages,
//    across tiles, as the GEMM's producer does;
//  - "tiled": the same walk over a layout in which each box is 32 KB of
//    consecutive bytes;
//  - "linear": consecutive 32 KB boxes, 512 KB to a CTA at a time, once
//    each: the most a read stream gets on this GPU.
// Each walk runs twice: 16-byte cp.async copies from every thread, and 2-D
// TMA box copies from one thread completing on mbarriers (the forward's
// mechanism). The cases are the benchmark's 32-128 expert shapes, forward
// ([G, N, K]) and dgrad (the column-wise [G, K, N]).
// --readers 1 gives each tile of "boxes" and "tiled" one CTA instead of two:
// twice the distinct weight bytes in flight for the same stages, as a
// kernel whose neighbouring CTAs read different weight tiles would have.
// --lag L (with two readers) starts the second CTA of a tile L k-blocks
// further along the tile and wraps around, so the two never ask for the
// same box at once: the first reads from L2 what the second fetched L
// steps before. If that reaches one reader's bandwidth, what two readers
// lose is asking for the same box at the same time, not sharing it.
// --prefetch P (TMA only) has the issuing thread also ask L2 for the box P
// steps past each one it loads (cp.async.bulk.prefetch.tensor): more
// distinct bytes in flight than the stages hold, without shared memory.
// --pace-cycles makes each CTA wait that many cycles per k-block before
// issuing the next, as MMAs would (0: as fast as memory allows).
// --l2-promotion sets the TMA maps' L2 promotion in bytes (how much L2
// fetches per miss; 128 by default, as CUTLASS encodes the kernels' maps,
// 256 as DeepGEMM does; the kernels' own: ops.set_l2_promotion).
// GB/s = distinct bytes / median time. Build: nvcc -O2 -std=c++17
// -gencode=arch=compute_90a,code=sm_90a bench/cpp/weight_read_probe.cu -o
// weight_read_probe (cmake: target gl_weight_read_probe).
#include <cuda.h>  // CUtensorMap (types only; the encoder comes from the runtime)
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "weight_read_probe: %s: %s\n", what, cudaGetErrorString(status));
  std::exit(1);
}

constexpr int kThreads = 256;
constexpr int kBoxRows = 256;   // the forward's tile along N
constexpr int kBoxBytes = 128;  // one FP8 k-block along K
constexpr int kBox = kBoxRows * kBoxBytes;
constexpr int kChunksPerThread = kBox / 16 / kThreads;  // 16-byte cp.async chunks
constexpr int kMaxStages = 6;
constexpr int kLinearBoxes = 16;  // 512 KB items for "linear"; every case is a multiple

enum class Walk { kBoxes, kTiled, kLinear };

struct Problem {
  const unsigned char* weights;
  int64_t groups, n, k;  // k in bytes
  int64_t tiles;         // work items: (group, N slice), each taken by `readers` CTAs
  int readers;
  int64_t lag;  // k-blocks the second reader of a tile runs ahead (wrapping)
  int stages;
  int64_t prefetch;  // TMA: steps past each loaded box whose box is prefetched into L2 (0: none)
  int64_t pace_cycles;
};

__device__ __forceinline__ void copy16(uint32_t smem, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(global));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void wait_groups() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Waits until at most `stages - 1` groups are pending: the oldest has landed
// (cp.async.wait_group takes an immediate).
__device__ __forceinline__ void wait_for_oldest(int stages) {
  switch (stages) {
    case 2: wait_groups<1>(); break;
    case 3: wait_groups<2>(); break;
    case 4: wait_groups<3>(); break;
    case 5: wait_groups<4>(); break;
    default: wait_groups<5>(); break;
  }
}

// The address of 16-byte chunk `c` (0..kBox/16) of box (group, slice, kb).
__device__ __forceinline__ const unsigned char* chunk_address(const Problem& p, Walk walk,
                                                              int64_t group, int64_t slice,
                                                              int64_t kb, int c) {
  const int row = c / (kBoxBytes / 16), col = (c % (kBoxBytes / 16)) * 16;
  if (walk == Walk::kTiled) {
    const int64_t kblocks = p.k / kBoxBytes, slices = p.n / kBoxRows;
    const int64_t box = (group * slices + slice) * kblocks + kb;
    return p.weights + box * kBox + row * kBoxBytes + col;
  }
  return p.weights + (group * p.n + slice * kBoxRows + row) * p.k + kb * kBoxBytes + col;
}

// The box of step `step` of this CTA's stream: its items are blockIdx.x,
// blockIdx.x + gridDim.x, ...; each item is `kblocks` boxes. "boxes" and
// "tiled": item i is tile i / readers, a (group, N slice); "linear": item i
// is `kblocks` consecutive boxes. Returns false past the CTA's last item.
struct Step {
  int64_t group, slice, kb;
};

__device__ __forceinline__ bool step_of(const Problem& p, Walk walk, int64_t kblocks, int64_t step,
                                        Step& out) {
  const int64_t item = blockIdx.x + (step / kblocks) * gridDim.x;
  if (item >= p.tiles * p.readers) return false;
  const int64_t tile = item / p.readers, slices = p.n / kBoxRows;
  out.kb = (step % kblocks + (item % p.readers) * p.lag) % kblocks;
  out.group = walk == Walk::kLinear ? tile : tile / slices;
  out.slice = walk == Walk::kLinear ? 0 : tile % slices;
  return true;
}

// Issues the box of `step` into its stage (an empty group past the end, so
// that every step leaves the same number of groups pending).
__device__ __forceinline__ void issue(const Problem& p, Walk walk, int64_t kblocks, int64_t step,
                                      uint32_t smem_base) {
  Step at;
  if (step_of(p, walk, kblocks, step, at)) {
    const uint32_t stage = smem_base + static_cast<uint32_t>(step % p.stages) * kBox;
    if (walk == Walk::kLinear) {
      const unsigned char* base = p.weights + (at.group * kblocks + at.kb) * kBox;
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int c = threadIdx.x + i * kThreads;
        copy16(stage + c * 16, base + c * 16);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int c = threadIdx.x + i * kThreads;
        copy16(stage + c * 16, chunk_address(p, walk, at.group, at.slice, at.kb, c));
      }
    }
  }
  commit();
}

// One CTA an SM streams its boxes through `stages` shared-memory stages,
// across item boundaries as the GEMM's producer does.
__global__ void __launch_bounds__(kThreads, 1)
    read_weights(Problem p, Walk walk, int64_t kblocks, unsigned int* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  unsigned int acc = 0;
  for (int64_t step = 0; step < p.stages - 1; ++step) issue(p, walk, kblocks, step, smem_base);
  long long last = clock64();
  Step at;
  for (int64_t step = 0; step_of(p, walk, kblocks, step, at); ++step) {
    issue(p, walk, kblocks, step + p.stages - 1, smem_base);
    wait_for_oldest(p.stages);  // this step's box has landed
    __syncthreads();
    acc ^= smem[(step % p.stages) * kBox + threadIdx.x * 16];
    __syncthreads();  // the stage may be refilled
    if (p.pace_cycles > 0) {
      while (clock64() - last < p.pace_cycles) {
      }
      last = clock64();
    }
  }
  wait_groups<0>();
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

// ---- the same walks through TMA, as the forward's producer loads ----------
//
// One thread issues each box as a 2-D bulk tensor copy (256 rows x 128
// bytes) completing on the stage's mbarrier; every thread waits on it.
// "boxes": a map over W as [G * N rows, K bytes]; "tiled" and "linear": a
// map over the box-contiguous bytes as [boxes * 256 rows, 128 bytes].

__device__ __forceinline__ void mbarrier_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void mbarrier_expect(uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes));
}

__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity));
}

__device__ __forceinline__ void tma_load_box(uint32_t dst, const CUtensorMap* map, int x, int y,
                                             uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void tma_prefetch_box(const CUtensorMap* map, int x, int y) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global [%0, {%1, %2}];\n" ::"l"(map), "r"(x),
               "r"(y)
               : "memory");
}

// The TMA coordinates (x: byte along the row, y: row) of a step's box.
__device__ __forceinline__ void box_coordinates(const Problem& p, Walk walk, int64_t kblocks,
                                                const Step& at, int& x, int& y) {
  if (walk == Walk::kBoxes) {
    x = static_cast<int>(at.kb * kBoxBytes);
    y = static_cast<int>(at.group * p.n + at.slice * kBoxRows);
    return;
  }
  const int64_t box = walk == Walk::kTiled
                          ? (at.group * (p.n / kBoxRows) + at.slice) * kblocks + at.kb
                          : at.group * kblocks + at.kb;
  x = 0;
  y = static_cast<int>(box * kBoxRows);
}

__device__ __forceinline__ void tma_issue(const Problem& p, Walk walk, int64_t kblocks,
                                          int64_t step, const CUtensorMap* map, uint32_t smem_base,
                                          uint32_t bars) {
  Step at;
  if (threadIdx.x != 0 || !step_of(p, walk, kblocks, step, at)) return;
  const uint32_t stage = static_cast<uint32_t>(step % p.stages);
  int x = 0, y = 0;
  box_coordinates(p, walk, kblocks, at, x, y);
  mbarrier_expect(bars + stage * 8, kBox);
  tma_load_box(smem_base + stage * kBox, map, x, y, bars + stage * 8);
  if (p.prefetch > 0 && step_of(p, walk, kblocks, step + p.prefetch, at)) {
    box_coordinates(p, walk, kblocks, at, x, y);
    tma_prefetch_box(map, x, y);
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    read_weights_tma(Problem p, Walk walk, int64_t kblocks, const __grid_constant__ CUtensorMap map,
                     unsigned int* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t bar_storage[kMaxStages];
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t bars = static_cast<uint32_t>(__cvta_generic_to_shared(bar_storage));
  if (threadIdx.x == 0) {
    for (int i = 0; i < p.stages; ++i) mbarrier_init(bars + i * 8, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::);
  }
  __syncthreads();
  unsigned int acc = 0;
  for (int64_t step = 0; step < p.stages - 1; ++step)
    tma_issue(p, walk, kblocks, step, &map, smem_base, bars);
  long long last = clock64();
  Step at;
  for (int64_t step = 0; step_of(p, walk, kblocks, step, at); ++step) {
    tma_issue(p, walk, kblocks, step + p.stages - 1, &map, smem_base, bars);
    const uint32_t stage = static_cast<uint32_t>(step % p.stages);
    mbarrier_wait(bars + stage * 8, static_cast<uint32_t>((step / p.stages) & 1));
    acc ^= smem[stage * kBox + threadIdx.x * 16];
    __syncthreads();  // the stage may be refilled
    if (p.pace_cycles > 0) {
      while (clock64() - last < p.pace_cycles) {
      }
      last = clock64();
    }
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

// Median milliseconds of `launch` (two warm-up runs first).
template <class Launch>
float median_ms(Launch launch, int reps) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> ms;
  for (int r = 0; r < reps + 2; ++r) {
    check(cudaEventRecord(start), "cudaEventRecord");
    launch();
    check(cudaGetLastError(), "launch");
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    if (r >= 2) ms.push_back(t);
  }
  check(cudaEventDestroy(start), "cudaEventDestroy");
  check(cudaEventDestroy(stop), "cudaEventDestroy");
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                           &found),
          "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
      std::fprintf(stderr, "weight_read_probe: the driver has no cuTensorMapEncodeTiled\n");
      std::exit(1);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

CUtensorMapL2promotion g_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;

// A 2-D byte map of `rows` rows of `row_bytes`, read in 256 x 128 boxes.
CUtensorMap byte_map(const unsigned char* base, int64_t rows, int64_t row_bytes) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {kBoxBytes, kBoxRows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult status = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<unsigned char*>(base), dims, strides, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, g_promotion,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) {
    std::fprintf(stderr, "weight_read_probe: cuTensorMapEncodeTiled failed (%d)\n",
                 static_cast<int>(status));
    std::exit(1);
  }
  return map;
}

enum class Engine { kCpAsync, kTma };

float time_walk(Engine engine, const Problem& p, Walk walk, int64_t kblocks, int grid, int reps,
                unsigned int* sink) {
  const size_t smem = static_cast<size_t>(p.stages) * kBox;
  if (engine == Engine::kCpAsync) {
    check(cudaFuncSetAttribute(read_weights, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)),
          "cudaFuncSetAttribute");
    return median_ms([&] { read_weights<<<grid, kThreads, smem>>>(p, walk, kblocks, sink); }, reps);
  }
  check(cudaFuncSetAttribute(read_weights_tma, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem)),
        "cudaFuncSetAttribute");
  const int64_t bytes = walk == Walk::kLinear ? p.tiles * kblocks * kBox : p.groups * p.n * p.k;
  const CUtensorMap map = walk == Walk::kBoxes ? byte_map(p.weights, p.groups * p.n, p.k)
                                               : byte_map(p.weights, bytes / kBoxBytes, kBoxBytes);
  return median_ms([&] { read_weights_tma<<<grid, kThreads, smem>>>(p, walk, kblocks, map, sink); },
                   reps);
}

struct Case {
  const char* name;
  int64_t groups, n, k;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 20, stages = 4, readers = 2;
  int64_t pace = 0, lag = 0, prefetch = 0;
  bool use_cp_async = true, use_tma = true;
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* flag) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "weight_read_probe: %s needs a value\n", flag);
        std::exit(2);
      }
      return std::atoll(argv[++i]);
    };
    if (!std::strcmp(argv[i], "--reps")) {
      reps = static_cast<int>(value("--reps"));
    } else if (!std::strcmp(argv[i], "--stages")) {
      stages = static_cast<int>(value("--stages"));
    } else if (!std::strcmp(argv[i], "--lag")) {
      lag = value("--lag");
    } else if (!std::strcmp(argv[i], "--prefetch")) {
      prefetch = value("--prefetch");
    } else if (!std::strcmp(argv[i], "--readers")) {
      readers = static_cast<int>(value("--readers"));
    } else if (!std::strcmp(argv[i], "--pace-cycles")) {
      pace = value("--pace-cycles");
    } else if (!std::strcmp(argv[i], "--engine") && i + 1 < argc &&
               (!std::strcmp(argv[i + 1], "cp_async") || !std::strcmp(argv[i + 1], "tma"))) {
      use_tma = !std::strcmp(argv[++i], "tma");
      use_cp_async = !use_tma;
    } else if (!std::strcmp(argv[i], "--l2-promotion")) {
      const long long bytes = value("--l2-promotion");
      if (bytes != 0 && bytes != 64 && bytes != 128 && bytes != 256) {
        std::fprintf(stderr, "weight_read_probe: --l2-promotion: expected 0, 64, 128 or 256\n");
        return 2;
      }
      g_promotion = bytes == 0     ? CU_TENSOR_MAP_L2_PROMOTION_NONE
                    : bytes == 64  ? CU_TENSOR_MAP_L2_PROMOTION_L2_64B
                    : bytes == 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                   : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    } else {
      std::fprintf(
          stderr,
          "weight_read_probe: unknown argument '%s'; expected --reps N, --stages S "
          "(2-%d), --readers 1|2, --lag L, --prefetch P, --pace-cycles C, --engine cp_async|tma, "
          "--l2-promotion B\n",
          argv[i], kMaxStages);
      return 2;
    }
  }
  if (reps < 1 || stages < 2 || stages > kMaxStages || pace < 0 || readers < 1 || readers > 2 ||
      lag < 0 || prefetch < 0) {
    std::fprintf(
        stderr,
        "weight_read_probe: expected --reps >= 1, --stages 2-%d, --readers 1 or 2, --lag >= 0, "
        "--prefetch >= 0, --pace >= 0\n",
        kMaxStages);
    return 2;
  }
  int device = 0, sms = 0, bus_bits = 0, mem_khz = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "attribute");
  check(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device), "attribute");
  check(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device), "attribute");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  const double peak_gbs = 2.0 * mem_khz * 1e3 * (bus_bits / 8) / 1e9;
  std::printf("device %s, %d SMs, peak DRAM %.0f GB/s (from its clock and bus width)\n", prop.name,
              sms, peak_gbs);
  std::printf(
      "stages %d (32 KB each), %d CTA(s) a tile (the second %lld k-blocks ahead), TMA L2 "
      "prefetch %lld boxes ahead, pace %lld cycles per k-block, median of %d runs\n",
      stages, readers, static_cast<long long>(readers > 1 ? lag : 0),
      static_cast<long long>(prefetch), static_cast<long long>(pace), reps);
  std::printf("TMA maps' L2 promotion: %s\n",
              g_promotion == CU_TENSOR_MAP_L2_PROMOTION_NONE      ? "none"
              : g_promotion == CU_TENSOR_MAP_L2_PROMOTION_L2_64B  ? "64 B"
              : g_promotion == CU_TENSOR_MAP_L2_PROMOTION_L2_128B ? "128 B"
                                                                  : "256 B");

  // The benchmark's 32-128 expert cases (bench_cases.json): the forward
  // reads W as [G, N, K] FP8 codes, the dgrad its column-wise copy [G, K, N].
  const Case cases[] = {
      {"qwen3_30b_fc1 fwd", 128, 1536, 2048}, {"qwen3_30b_fc1 dgrad", 128, 2048, 1536},
      {"qwen3_30b_fc2 fwd", 128, 2048, 768},  {"qwen3_30b_fc2 dgrad", 128, 768, 2048},
      {"dsv3_ep8_fc1 fwd", 32, 4096, 7168},   {"dsv3_ep8_fc1 dgrad", 32, 7168, 4096},
      {"dsv3_ep8_fc2 fwd", 32, 7168, 2048},   {"dsv3_ep8_fc2 dgrad", 32, 2048, 7168}};
  int64_t most = 0;
  for (const Case& c : cases) most = std::max(most, c.groups * c.n * c.k);
  unsigned char* weights = nullptr;
  unsigned int* sink = nullptr;
  check(cudaMalloc(&weights, most), "cudaMalloc");
  check(cudaMalloc(&sink, sizeof(unsigned int)), "cudaMalloc");
  check(cudaMemset(weights, 0x5a, most), "cudaMemset");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  for (const Engine engine : {Engine::kCpAsync, Engine::kTma}) {
    if ((engine == Engine::kCpAsync && !use_cp_async) || (engine == Engine::kTma && !use_tma))
      continue;
    std::printf("%s:\n%-20s %6s %14s %14s %14s   (GB/s, %% of peak)\n",
                engine == Engine::kTma ? "TMA (2-D bulk tensor copies)" : "cp.async (16 B)", "case",
                "MB", "boxes", "tiled", "linear");
    for (const Case& c : cases) {
      const int64_t tiles = c.groups * (c.n / kBoxRows);
      Problem p{weights, c.groups, c.n, c.k, tiles, readers, lag, stages, prefetch, pace};
      const double bytes = static_cast<double>(c.groups * c.n * c.k);
      const int64_t kblocks = c.k / kBoxBytes;
      const float boxes = time_walk(engine, p, Walk::kBoxes, kblocks, sms, reps, sink);
      const float tiled = time_walk(engine, p, Walk::kTiled, kblocks, sms, reps, sink);
      Problem linear = p;  // items of kLinearBoxes consecutive boxes, read once
      linear.tiles = static_cast<int64_t>(bytes) / (kBox * kLinearBoxes);
      linear.readers = 1;
      const float plain = time_walk(engine, linear, Walk::kLinear, kLinearBoxes, sms, reps, sink);
      const auto gbs = [&](float ms) { return bytes / (ms * 1e-3) / 1e9; };
      std::printf("%-20s %6.0f %8.0f (%2.0f%%) %8.0f (%2.0f%%) %8.0f (%2.0f%%)\n", c.name,
                  bytes / 1e6, gbs(boxes), 100 * gbs(boxes) / peak_gbs, gbs(tiled),
                  100 * gbs(tiled) / peak_gbs, gbs(plain), 100 * gbs(plain) / peak_gbs);
    }
  }
  check(cudaFree(weights), "cudaFree");
  check(cudaFree(sink), "cudaFree");
  return 0;
}
