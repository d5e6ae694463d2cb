// The FP8 quantization operations on the GPU against the CPU implementation,
// bit for bit: codes, scale_inv, the state (scale, amax), dequantized values;
// the fused bias gradient within fp32 summation-order tolerance. Group sizes
// on the host and on the device (int64, int32), many groups, clamped bad
// device sizes, and the fused delayed-scaling update. Compiled wherever nvcc
// is; every test skips itself where no GPU is.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/fp8/cuda/quantize_ops_cuda.h"
#include "core/fp8/delayed_scaling_ops.h"
#include "core/fp8/quantize_ops.h"
#include "core/fp8/quantize_ops_backend.h"
#include "fp8_ops_test_util.h"

#define ASSERT_CUDA(expr)                                                    \
  do {                                                                       \
    const cudaError_t gl_test_status_ = (expr);                              \
    ASSERT_EQ(gl_test_status_, cudaSuccess)                                  \
        << #expr << " failed: " << cudaGetErrorName(gl_test_status_) << " (" \
        << cudaGetErrorString(gl_test_status_) << ")";                       \
  } while (0)

namespace gl_test {
namespace {

namespace fp8 = grouped_linear::fp8;
using grouped_linear::DeviceType;
using grouped_linear::Error;
using grouped_linear::ErrorKind;

const ExecContext kCpu{};
const Device kHost{};

bool gpu_present(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    *why = std::string("no usable CUDA device: ") + cudaGetErrorName(status);
    (void)cudaGetLastError();
    return false;
  }
  if (count == 0) *why = "no CUDA device";
  return count > 0;
}

// The allocator a binding would pass, on plain cudaMalloc; counts what is
// still out so a test can see every workspace come back.
class CountingAllocator final : public grouped_linear::DeviceAllocator {
 public:
  void* allocate(size_t bytes, int, void*) override {
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status != cudaSuccess)
      throw Error(ErrorKind::kRuntime,
                  std::string("cudaMalloc failed: ") + cudaGetErrorName(status));
    ++outstanding_;
    return ptr;
  }
  // The memory may still be in use by queued work: free it after the stream
  // drains (cudaFree synchronises the device).
  void deallocate(void* ptr) override {
    (void)cudaFree(ptr);
    --outstanding_;
  }
  int outstanding() const { return outstanding_; }

 private:
  int outstanding_ = 0;
};

class Fp8OpsCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!gpu_present(&why)) GTEST_SKIP() << why;
    ASSERT_CUDA(cudaGetDevice(&device_));
    static cudaStream_t shared = nullptr;  // non-blocking: no help from the legacy stream
    if (shared == nullptr) ASSERT_CUDA(cudaStreamCreateWithFlags(&shared, cudaStreamNonBlocking));
    stream_ = shared;
    fp8::register_cuda_quantize_ops();
    seed_ = seed_for(current_test_name());
    rng_.seed(seed_);
  }
  void TearDown() override {
    for (void* p : owned_) (void)cudaFree(p);
    owned_.clear();
  }

  Device gpu() const { return Device{DeviceType::kCUDA, device_}; }
  ExecContext ctx() {
    ExecContext c;
    c.device = gpu();
    c.stream = stream_;
    c.allocator = &allocator_;
    return c;
  }

  // Host -> device on the test's stream, complete on return. Not plain
  // cudaMemcpy: from pageable memory it returns once the bytes are staged,
  // with the DMA to the device still running on the legacy stream, which a
  // non-blocking stream does not wait for; a kernel launched next could then
  // read stale inputs or have its outputs overwritten by the late poison.
  void to_device(void* dst, const void* src, size_t bytes) {
    ASSERT_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
  }

  // Device copies of the buffers (poison included).
  void upload(const std::vector<Buf*>& bufs) {
    for (Buf* b : bufs) {
      b->dev = nullptr;
      if (b->size() == 0) continue;
      ASSERT_CUDA(cudaMalloc(&b->dev, b->size()));
      owned_.push_back(b->dev);
      ASSERT_NO_FATAL_FAILURE(to_device(b->dev, b->host.data(), b->size()));
    }
  }
  void download(const std::vector<Buf*>& bufs) {
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
    for (Buf* b : bufs)
      if (b->size() != 0)
        ASSERT_CUDA(cudaMemcpy(b->host.data(), b->dev, b->size(), cudaMemcpyDeviceToHost));
  }

  // One activation case on both sides; everything compared.
  void run_activation(ActivationCase a) {
    SCOPED_TRACE(seed_message(seed_));
    SCOPED_TRACE(a.describe());
    ActivationCase cpu = a;
    ASSERT_NO_FATAL_FAILURE(upload(a.buffers()));
    fp8::quantize_activation(a.request(true, gpu()), ctx());
    ASSERT_NO_FATAL_FAILURE(download(a.buffers()));
    fp8::quantize_activation(cpu.request(false, kHost), kCpu);
    expect_same_bytes(a.row, cpu.row, "row-wise codes");
    expect_same_floats(a.row_scale, cpu.row_scale, "row-wise scale_inv");
    expect_same_bytes(a.col, cpu.col, "column-wise codes");
    expect_same_floats(a.col_scale, cpu.col_scale, "column-wise scale_inv");
    expect_same_floats(a.scale, cpu.scale, "state.scale");
    expect_same_floats(a.amax, cpu.amax, "state.amax");
    if (a.with_dbias) check_dbias(a, a.dbias, "GPU");
    for (bool columnwise : {false, true}) {
      if (!(columnwise ? a.columnwise : a.rowwise)) continue;
      const int64_t stride = a.c() + 3;
      Buf out, want;
      out.floats(static_cast<size_t>(a.t() * stride));
      want = out;
      ASSERT_NO_FATAL_FAILURE(upload({&out}));
      fp8::dequantize_activation(a.quantized(true, gpu()), columnwise, a.splits(true),
                                 MatrixView{out.dev, DType::kFloat32, gpu(), a.t(), a.c(), stride},
                                 ctx());
      ASSERT_NO_FATAL_FAILURE(download({&out}));
      fp8::dequantize_activation(
          cpu.quantized(false, kHost), columnwise, cpu.splits(false),
          MatrixView{want.ptr(false), DType::kFloat32, kHost, a.t(), a.c(), stride}, kCpu);
      expect_same_floats(out, want,
                         columnwise ? "dequantized column-wise copy" : "dequantized row-wise copy");
    }
    EXPECT_EQ(allocator_.outstanding(), 0) << "a workspace was not given back";
  }

  void run_weight(WeightCase w) {
    SCOPED_TRACE(seed_message(seed_));
    SCOPED_TRACE(w.describe());
    WeightCase cpu = w;
    ASSERT_NO_FATAL_FAILURE(upload(w.buffers()));
    fp8::quantize_weight(w.request(true, gpu()), ctx());
    ASSERT_NO_FATAL_FAILURE(download(w.buffers()));
    fp8::quantize_weight(cpu.request(false, kHost), kCpu);
    expect_same_bytes(w.row, cpu.row, "row-wise codes");
    expect_same_bytes(w.col, cpu.col, "column-wise codes");
    expect_same_floats(w.row_scale, cpu.row_scale, "row-wise scale_inv");
    expect_same_floats(w.col_scale, cpu.col_scale, "column-wise scale_inv");
    expect_same_floats(w.scale, cpu.scale, "state.scale");
    expect_same_floats(w.amax, cpu.amax, "state.amax");
    for (bool columnwise : {false, true}) {
      if (!(columnwise ? w.columnwise : w.rowwise)) continue;
      const int64_t stride = w.k() + 1, gstride = w.n() * stride + 3;
      Buf out, want;
      out.floats(static_cast<size_t>(w.g() * gstride));
      want = out;
      ASSERT_NO_FATAL_FAILURE(upload({&out}));
      fp8::dequantize_weight(w.quantized(true, gpu()), columnwise,
                             GroupedMatrixView{out.dev, DType::kFloat32, gpu(), w.g(), w.n(), w.k(),
                                               stride, gstride, true},
                             ctx());
      ASSERT_NO_FATAL_FAILURE(download({&out}));
      fp8::dequantize_weight(cpu.quantized(false, kHost), columnwise,
                             GroupedMatrixView{want.ptr(false), DType::kFloat32, kHost, w.g(),
                                               w.n(), w.k(), stride, gstride, true},
                             kCpu);
      expect_same_floats(
          out, want, columnwise ? "dequantized column-wise weight" : "dequantized row-wise weight");
    }
    EXPECT_EQ(allocator_.outstanding(), 0) << "a workspace was not given back";
  }

  // A forward's X and W through quantize_forward_operands on the GPU, against
  // the CPU's two casts in turn: codes, scales and both states.
  void run_forward_operands(ActivationCase a, WeightCase w) {
    SCOPED_TRACE(seed_message(seed_));
    SCOPED_TRACE(a.describe() + " | weight " + w.describe());
    ActivationCase a_cpu = a;
    WeightCase w_cpu = w;
    ASSERT_NO_FATAL_FAILURE(upload(a.buffers()));
    ASSERT_NO_FATAL_FAILURE(upload(w.buffers()));
    fp8::quantize_forward_operands(a.request(true, gpu()), w.request(true, gpu()), ctx());
    ASSERT_NO_FATAL_FAILURE(download(a.buffers()));
    ASSERT_NO_FATAL_FAILURE(download(w.buffers()));
    fp8::quantize_activation(a_cpu.request(false, kHost), kCpu);
    fp8::quantize_weight(w_cpu.request(false, kHost), kCpu);
    expect_same_forward_operands(a, a_cpu, w, w_cpu);
    EXPECT_EQ(allocator_.outstanding(), 0) << "a workspace was not given back";
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  CountingAllocator allocator_;
  std::vector<void*> owned_;
  uint32_t seed_ = 0;
  std::mt19937 rng_;
};

ActivationCase activation(const ActivationSpec& spec, DType dtype, const KindVariant& v,
                          SplitsAt at) {
  ActivationCase a;
  a.spec = spec;
  a.dtype = dtype;
  a.kind = v.kind;
  a.format = v.format;
  a.power_2 = v.power_2;
  a.margin = v.margin;
  a.splits_at = at;
  a.dbias_dtype = dtype;
  return a;
}

const SplitsAt kAllSplitsAt[] = {SplitsAt::kHost, SplitsAt::kDeviceInt64, SplitsAt::kDeviceInt32};

// The kernels' float -> fp8 conversion (the hardware one on sm_89 and later)
// agrees with to_fp8 on every float, NaN, infinity and subnormal included.
TEST_F(Fp8OpsCuda, ConversionMatchesToFp8OnEveryFloat) {
  for (Format f : {Format::kE4M3, Format::kE5M2})
    EXPECT_EQ(fp8::cuda_impl::fp8_conversion_mismatches(f), 0u)
        << (f == Format::kE4M3 ? "e4m3" : "e5m2");
}

TEST_F(Fp8OpsCuda, ActivationMatchesCpu) {
  for (const ActivationSpec& spec : activation_specs())
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
      for (const KindVariant& v : kind_variants())
        for (SplitsAt at : kAllSplitsAt)
          for (Split split : {Split::kRandomWithEmpty, Split::kAllInOne}) {
            ActivationCase a = activation(spec, dtype, v, at);
            a.make(rng_, split, /*specials=*/false);
            run_activation(a);
            if (HasFatalFailure()) return;
          }
}

TEST_F(Fp8OpsCuda, ActivationSpecialValuesMatchCpu) {
  for (const ActivationSpec& spec : activation_specs())
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
      for (const KindVariant& v : kind_variants()) {
        ActivationCase a = activation(spec, dtype, v, SplitsAt::kDeviceInt32);
        a.dbias_dtype = DType::kFloat32;
        a.make(rng_, Split::kRandomWithEmpty, /*specials=*/true);
        run_activation(a);
      }
  // A recorded NaN amax stays NaN.
  ActivationCase a =
      activation({"small", 20, 8, 2, 0}, DType::kBFloat16, kind_variants()[0], SplitsAt::kHost);
  a.make(rng_, Split::kRandomWithEmpty, false);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(a.amax.host.data(), &nan, 4);
  run_activation(a);
}

TEST_F(Fp8OpsCuda, ActivationCopiesOnRequest) {
  for (int which = 0; which < 3; ++which)
    for (const KindVariant& v : kind_variants())
      for (SplitsAt at : {SplitsAt::kHost, SplitsAt::kDeviceInt64}) {
        ActivationCase a = activation({"C130", 300, 130, 5, 3}, DType::kBFloat16, v, at);
        a.rowwise = which != 1;
        a.columnwise = which != 0;
        a.with_dbias = which != 2;
        a.with_amax = which == 1;
        a.make(rng_, Split::kRandomWithEmpty, false);
        run_activation(a);
      }
}

// Full 128 x 128 tiles of 16-bit values with aligned strides and no bias
// gradient: per-tensor scales take the wide path (quantize_full_tile), in
// every tile ("FullTiles": groups of whole row tiles) or beside partial ones
// (random groups, C not a multiple of 128); a row pad of 8 elements keeps
// the alignment, one of 3 breaks it (the regular path throughout). Block
// scales take their own wide path (quantize_wide_tile_blockwise); the bias
// gradient always takes the regular path.
TEST_F(Fp8OpsCuda, ActivationFullTilesMatchCpu) {
  struct FullCase {
    ActivationSpec spec;
    std::vector<int64_t> sizes;  // empty: random, with empty groups
  };
  const FullCase cases[] = {
      {{"FullTiles", 1024, 384, 3, 0}, {256, 512, 256}},
      {{"FullTilesPad8", 1024, 384, 4, 8}, {0, 640, 128, 256}},
      {{"MixedTiles", 700, 300, 4, 0}, {}},
      {{"Unaligned", 512, 256, 2, 3}, {256, 256}},
  };
  for (const FullCase& fc : cases)
    for (DType dtype : {DType::kFloat16, DType::kBFloat16})
      for (const KindVariant& v : kind_variants())
        for (SplitsAt at : kAllSplitsAt)
          for (int which = 0; which < 3; ++which) {
            ActivationCase a = activation(fc.spec, dtype, v, at);
            a.rowwise = which != 1;
            a.columnwise = which != 0;
            a.with_dbias = false;
            a.make(rng_, Split::kRandomWithEmpty, /*specials=*/false);
            if (!fc.sizes.empty()) a.use_sizes(fc.sizes);
            run_activation(a);
            if (HasFatalFailure()) return;
          }
}

// The wide paths with NaN, Inf and huge values among the inputs: a row or
// column holding a NaN quantizes value by value (fp8x4, fp8x4_scaled), the
// others two values a conversion, and both must give the CPU's bits.
TEST_F(Fp8OpsCuda, ActivationFullTilesSpecialValuesMatchCpu) {
  const ActivationSpec specs[] = {{"FullTiles", 1024, 384, 3, 0}, {"MixedTiles", 700, 300, 4, 0}};
  for (int round = 0; round < 3; ++round)
    for (const ActivationSpec& spec : specs)
      for (DType dtype : {DType::kFloat16, DType::kBFloat16})
        for (const KindVariant& v : kind_variants())
          for (int which = 0; which < 3; ++which) {
            ActivationCase a = activation(spec, dtype, v, SplitsAt::kHost);
            a.rowwise = which != 1;
            a.columnwise = which != 0;
            a.with_dbias = false;
            a.make(rng_, Split::kRandomWithEmpty, /*specials=*/true);
            run_activation(a);
            if (HasFatalFailure()) return;
          }
}

// One non-empty group among empty ones, C not a multiple of 128, pinned
// splits. The first case once failed on an H200 (seed 3500865919): exactly
// the dequantize kernel's last 32 x 32 tile of [T, C] (rows 288..299,
// columns 128..129, the end of the output buffer) read back as NaN while the
// codes and scales matched: the upload's pageable cudaMemcpy of the poisoned
// output had not landed when the kernel wrote (see to_device()). The case
// repeats, since such a failure depends on timing.
TEST_F(Fp8OpsCuda, OneGroupAmongEmptyGroups) {
  struct Pinned {
    ActivationSpec spec;
    std::vector<int64_t> sizes;
  };
  const Pinned pinned[] = {
      {{"C130", 300, 130, 5, 3}, {0, 300, 0, 0, 0}},  // the H200 failure
      {{"C130", 300, 130, 5, 3}, {300, 0, 0, 0, 0}},
      {{"C130", 300, 130, 5, 3}, {0, 0, 0, 0, 300}},
      {{"C130", 300, 130, 5, 3}, {0, 0, 299, 0, 1}},      // a one-row group after it
      {{"C130T128", 128, 130, 5, 3}, {0, 0, 128, 0, 0}},  // exactly one row tile
      {{"C129T257", 257, 129, 4, 0}, {0, 0, 257, 0}},     // one past a tile both ways
      {{"C200T44", 44, 200, 3, 1}, {0, 44, 0}},           // one partial row tile
      {{"C1", 300, 1, 5, 0}, {0, 300, 0, 0, 0}},          // one column
      {{"C4100", 150, 4096 + 4, 3, 0}, {0, 150, 0}},      // many column tiles, 4 left over
  };
  for (const Pinned& p : pinned) {
    int64_t total = 0;
    for (int64_t m : p.sizes) total += m;
    ASSERT_EQ(total, p.spec.t) << p.spec.name;
    ASSERT_EQ(static_cast<int64_t>(p.sizes.size()), p.spec.g) << p.spec.name;
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
      for (const KindVariant& v : kind_variants())
        for (SplitsAt at : kAllSplitsAt) {
          ActivationCase a = activation(p.spec, dtype, v, at);
          a.make(rng_, Split::kAllInOne, /*specials=*/false);
          a.use_sizes(p.sizes);
          run_activation(a);
          if (HasFatalFailure()) return;
        }
  }
  // The failing configuration itself, again with fresh inputs each time.
  for (int repeat = 0; repeat < 50; ++repeat) {
    ActivationCase a =
        activation(pinned[0].spec, DType::kFloat16, {RecipeKind::kCurrent, Format::kE5M2, true, 2},
                   SplitsAt::kDeviceInt64);
    a.make(rng_, Split::kAllInOne, /*specials=*/false);
    a.use_sizes(pinned[0].sizes);
    run_activation(a);
    if (HasFatalFailure()) return;
  }
}

// More groups than host sizes fit in kernel arguments (staged copy), and the
// same with device sizes; many tiles per group for the bias gradient.
TEST_F(Fp8OpsCuda, ManyGroupsAndLargeProblems) {
  const ActivationSpec specs[] = {{"G1500", 5000, 40, 1500, 0},
                                  {"Big", 4096 + 77, 1024 + 24, 8, 0},
                                  {"BigStrided", 2000, 520, 3, 8}};
  for (const ActivationSpec& spec : specs)
    for (const KindVariant& v : kind_variants())
      for (SplitsAt at : {SplitsAt::kHost, SplitsAt::kDeviceInt32}) {
        ActivationCase a = activation(spec, DType::kBFloat16, v, at);
        a.dbias_dtype = DType::kFloat32;
        a.make(rng_, Split::kRandomWithEmpty, false);
        run_activation(a);
      }
}

// Bad device sizes are clamped as on the CPU (negative -> 0, past T dropped).
TEST_F(Fp8OpsCuda, BadDeviceSizesClampLikeCpu) {
  const std::vector<std::vector<int64_t>> bad = {
      {10, -3, 25, 100}, {5, 5, 5, 5}, {-1, -1, -1, -1}, {0, 0, 1000000000000ll, 3}};
  for (const auto& sizes : bad)
    for (const KindVariant& v : kind_variants())
      for (SplitsAt at : {SplitsAt::kDeviceInt64, SplitsAt::kDeviceInt32}) {
        ActivationCase a = activation({"clamp", 40, 130, 4, 0}, DType::kFloat16, v, at);
        a.make(rng_, Split::kRandomWithEmpty, false);
        for (size_t g = 0; g < sizes.size(); ++g) {
          if (at == SplitsAt::kDeviceInt64) {
            std::memcpy(&a.sizes_buf.host[g * 8], &sizes[g], 8);
          } else {
            const int32_t narrow = static_cast<int32_t>(
                std::max<int64_t>(std::min<int64_t>(sizes[g], INT32_MAX), INT32_MIN));
            std::memcpy(&a.sizes_buf.host[g * 4], &narrow, 4);
          }
        }
        a.with_dbias = false;  // check_dbias reads the host sizes, which these are not
        SCOPED_TRACE(sizes_text(sizes));
        run_activation(a);
      }
}

TEST_F(Fp8OpsCuda, WeightMatchesCpu) {
  for (const WeightSpec& spec : weight_specs())
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
      for (const KindVariant& v : kind_variants())
        for (bool specials : {false, true}) {
          WeightCase w;
          w.spec = spec;
          w.dtype = dtype;
          w.kind = v.kind;
          w.format = v.format;
          w.power_2 = v.power_2;
          w.margin = v.margin;
          w.make(rng_, specials);
          run_weight(w);
          if (HasFatalFailure()) return;
        }
  // One copy only: partial tiles, and full tiles (the wide path, which
  // stages the codes for the column-wise copy).
  for (const WeightSpec& spec :
       {WeightSpec{"Big", 5, 300, 260, 0}, WeightSpec{"BigFullTiles", 2, 384, 256, 0}})
    for (bool rowwise : {false, true})
      for (const KindVariant& v : kind_variants()) {
        WeightCase w;
        w.spec = spec;
        w.kind = v.kind;
        w.format = v.format;
        w.rowwise = rowwise;
        w.columnwise = !rowwise;
        w.make(rng_, false);
        run_weight(w);
      }
  // More tiles than the grid has CTAs (4 per group here, 600 tiles against at
  // most a few per SM resident): each CTA walks several groups, and the
  // per-tensor amax of a group is merged when a CTA leaves it. Specials put a
  // NaN or an infinity into some groups.
  for (bool specials : {false, true}) {
    WeightCase w;
    w.spec = {"ManyGroups", 150, 130, 129, 0};
    w.make(rng_, specials);
    run_weight(w);
  }
}

// A forward's two casts as one operation (current scaling: each cast's amax
// pass inside its launch, a grid-wide barrier between): one launch where both fit in two
// waves (16-bit inputs of one dtype, ManyGroups' 600 tiles included), two
// otherwise (float32 inputs, X and W of different dtypes as under
// torch.autocast, and the last weight, whose 2800 tiles are more than two
// waves of 256-thread CTAs on any GPU of up to 170 SMs), with the bits of
// the two casts either way.
TEST_F(Fp8OpsCuda, ForwardOperandsMatchCpu) {
  const std::vector<ActivationSpec> xs = activation_specs();
  std::vector<WeightSpec> weights = weight_specs();
  weights.push_back({"ManyGroups", 150, 130, 129, 0});
  weights.push_back({"BeyondTwoWaves", 1400, 1, 129, 0});  // 2 tiles a group
  size_t i = 0;
  using DTypes = std::pair<DType, DType>;  // X's, W's
  for (const DTypes& dtypes :
       {DTypes{DType::kFloat32, DType::kFloat32}, DTypes{DType::kFloat16, DType::kFloat16},
        DTypes{DType::kBFloat16, DType::kBFloat16}, DTypes{DType::kBFloat16, DType::kFloat32},
        DTypes{DType::kFloat16, DType::kFloat32}, DTypes{DType::kFloat32, DType::kBFloat16}})
    for (const KindVariant& v : kind_variants())
      for (const WeightSpec& spec : weights) {
        ActivationCase a = activation(xs[i % xs.size()], dtypes.first, v, kAllSplitsAt[i % 3]);
        a.columnwise = i % 2 == 0;
        a.with_dbias = false;
        a.make(rng_, Split::kRandomWithEmpty, /*specials=*/i % 4 == 1);
        WeightCase w;
        w.spec = spec;
        w.dtype = dtypes.second;
        apply_variant(w, v);
        w.columnwise = i % 3 != 0;
        w.make(rng_, /*specials=*/i % 4 == 3);
        run_forward_operands(a, w);
        if (HasFatalFailure()) return;
        ++i;
      }
}

// Current scaling with the amax pass inside the cast's cooperative launch:
// a one-tile operand gets a one-CTA grid that takes all 16 of its amax chunks
// in turn, sharing one shared-memory scratch. Repeated on fresh inputs (the
// largest |x| lands in a different chunk each time), since a missing barrier
// between chunks shows only when a warp of the next chunk overwrites the
// scratch before the previous chunk's sum has read it.
TEST_F(Fp8OpsCuda, CurrentScalingWhenOneCtaTakesEveryAmaxChunk) {
  const KindVariant current{RecipeKind::kCurrent, Format::kE4M3, false, 0};
  for (int repeat = 0; repeat < 48; ++repeat) {
    ActivationCase a =
        activation({"OneTile", 128, 128, 2, 0}, DType::kBFloat16, current, SplitsAt::kHost);
    a.columnwise = repeat % 2 == 0;
    a.with_dbias = false;
    a.make(rng_, Split::kRandomWithEmpty, /*specials=*/false);
    run_activation(a);
    if (HasFatalFailure()) return;
    WeightCase w;
    w.spec = {"OneTile", 1, 128, 128, 0};
    w.dtype = DType::kBFloat16;
    apply_variant(w, current);
    w.make(rng_, /*specials=*/false);
    ActivationCase x =
        activation({"OneTile", 128, 128, 1, 0}, DType::kBFloat16, current, SplitsAt::kDeviceInt32);
    x.with_dbias = false;
    x.make(rng_, Split::kAllInOne, /*specials=*/false);
    run_forward_operands(x, w);
    if (HasFatalFailure()) return;
  }
}

// Histories of several sets (formats differ) on both sides.
struct HistorySets {
  std::vector<std::vector<float>> history, scale, scale_inv;
  std::vector<int64_t> len;
};

// `lens`, `widths`: the history lengths and tensor counts, in turn (default:
// 1 to 17 rows, 0 to 299 tensors).
HistorySets make_history(std::mt19937& rng, int count, const std::vector<int64_t>& lens = {},
                         const std::vector<int64_t>& widths = {}) {
  HistorySets h;
  std::uniform_real_distribution<float> v(0.f, 100.f);
  for (int i = 0; i < count; ++i) {
    const int64_t len = lens.empty() ? 1 + (i * 5) % 17 : lens[i % lens.size()];
    const int64_t n = widths.empty() ? (i * 37) % 300  // n = 0 included; > 128 too
                                     : widths[i % widths.size()];
    h.len.push_back(len);
    h.history.emplace_back(static_cast<size_t>(len * n));
    for (float& x : h.history.back()) x = v(rng) < 10.f ? 0.f : v(rng);
    h.scale.emplace_back(static_cast<size_t>(n));
    for (float& x : h.scale.back()) x = v(rng) + 1.f;
    h.scale_inv.emplace_back(static_cast<size_t>(n), 0.f);
  }
  return h;
}

TEST_F(Fp8OpsCuda, DelayedScalingUpdateMatchesCpu) {
  struct Sets {
    int count;
    std::vector<int64_t> lens, widths;
  };
  // 300: more sets than one launch takes. The last two: histories longer
  // than one chunk of the CUDA roll (512 rows at 32 tensors, 16384 / width
  // at fewer), filling their last chunk or not, and the recipe's default
  // 1024; one tensor (a module's backward set), 1 + G (its forward set) and
  // widths whose last column block is 1, 9 or 31 wide.
  const std::vector<Sets> cases = {
      {1, {}, {}},
      {7, {}, {}},
      {300, {}, {}},
      {6, {129, 300, 1024, 1025, 2, 1000}, {}},
      {9, {1024, 1537, 1024, 129, 300, 1025, 2, 1000, 1024}, {1, 1, 9, 33, 129, 32, 2, 300, 63}}};
  for (fp8::AmaxAlgo algo : {fp8::AmaxAlgo::kMax, fp8::AmaxAlgo::kMostRecent})
    for (const Sets& sets : cases) {
      const int count = sets.count;
      HistorySets h = make_history(rng_, count, sets.lens, sets.widths);
      HistorySets cpu = h;
      std::vector<fp8::DelayedScalingUpdate> dev(count), host(count);
      for (int i = 0; i < count; ++i) {
        const int64_t n = static_cast<int64_t>(h.scale[i].size());
        const float fmax = fp8::format_info(i % 2 ? Format::kE5M2 : Format::kE4M3).max;
        float* d[3] = {nullptr, nullptr, nullptr};
        std::vector<float>* src[3] = {&h.history[i], &h.scale[i], &h.scale_inv[i]};
        for (int b = 0; b < 3; ++b) {
          if (src[b]->empty()) continue;
          ASSERT_CUDA(cudaMalloc(reinterpret_cast<void**>(&d[b]), src[b]->size() * 4));
          owned_.push_back(d[b]);
          ASSERT_NO_FATAL_FAILURE(to_device(d[b], src[b]->data(), src[b]->size() * 4));
        }
        dev[i] = fp8::DelayedScalingUpdate{{d[0], d[1], d[2], h.len[i], n}, fmax};
        host[i] = fp8::DelayedScalingUpdate{
            {cpu.history[i].data(), cpu.scale[i].data(), cpu.scale_inv[i].data(), h.len[i], n},
            fmax};
      }
      fp8::update_delayed_scaling(dev.data(), count, 1, algo, false, ctx());
      fp8::update_delayed_scaling(host.data(), count, 1, algo, false, kCpu);
      ASSERT_CUDA(cudaStreamSynchronize(stream_));
      for (int i = 0; i < count; ++i) {
        std::vector<float>* dst[3] = {&h.history[i], &h.scale[i], &h.scale_inv[i]};
        float* src[3] = {dev[i].group.history, dev[i].group.scale, dev[i].group.scale_inv};
        for (int b = 0; b < 3; ++b)
          if (!dst[b]->empty())
            ASSERT_CUDA(
                cudaMemcpy(dst[b]->data(), src[b], dst[b]->size() * 4, cudaMemcpyDeviceToHost));
        EXPECT_EQ(h.history[i], cpu.history[i]) << "set " << i;
        EXPECT_EQ(h.scale[i], cpu.scale[i]) << "set " << i;
        EXPECT_EQ(h.scale_inv[i], cpu.scale_inv[i]) << "set " << i;
      }
    }
}

TEST_F(Fp8OpsCuda, DelayedScalingCheckFiniteThrowsAndUpdatesNothing) {
  HistorySets h = make_history(rng_, 280);
  // Set 270 (in the second launch's batch), tensor 5, row 1: infinite.
  ASSERT_GT(h.scale[270].size(), 5u);
  h.history[270][h.scale[270].size() + 5] = std::numeric_limits<float>::infinity();
  std::vector<fp8::DelayedScalingUpdate> dev(h.scale.size());
  std::vector<float*> hist_dev(h.scale.size(), nullptr), scale_dev(h.scale.size(), nullptr);
  for (size_t i = 0; i < h.scale.size(); ++i) {
    const int64_t n = static_cast<int64_t>(h.scale[i].size());
    float* d[3] = {nullptr, nullptr, nullptr};
    std::vector<float>* src[3] = {&h.history[i], &h.scale[i], &h.scale_inv[i]};
    for (int b = 0; b < 3; ++b) {
      if (src[b]->empty()) continue;
      ASSERT_CUDA(cudaMalloc(reinterpret_cast<void**>(&d[b]), src[b]->size() * 4));
      owned_.push_back(d[b]);
      ASSERT_NO_FATAL_FAILURE(to_device(d[b], src[b]->data(), src[b]->size() * 4));
    }
    dev[i] = fp8::DelayedScalingUpdate{{d[0], d[1], d[2], h.len[i], n}, 448.f};
  }
  try {
    fp8::update_delayed_scaling(dev.data(), static_cast<int>(dev.size()), 0, fp8::AmaxAlgo::kMax,
                                true, ctx());
    ADD_FAILURE() << "a non-finite amax was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_NE(std::string(e.what()).find("tensor 5 of set 270"), std::string::npos) << e.what();
  }
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  for (size_t i = 0; i < h.scale.size(); ++i) {
    std::vector<float> history(h.history[i].size()), scale(h.scale[i].size());
    if (history.empty()) continue;
    ASSERT_CUDA(cudaMemcpy(history.data(), dev[i].group.history, history.size() * 4,
                           cudaMemcpyDeviceToHost));
    ASSERT_CUDA(
        cudaMemcpy(scale.data(), dev[i].group.scale, scale.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(history, h.history[i]) << "set " << i << " was rolled";
    EXPECT_EQ(scale, h.scale[i]) << "set " << i << " was updated";
  }
  EXPECT_EQ(allocator_.outstanding(), 0);
}

}  // namespace
}  // namespace gl_test

// As in test_cuda_engine.cpp: exit 77 (CTest: skipped) when every test that
// ran skipped itself because no GPU is here.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  if (status == 0 && unit.test_to_run_count() > 0 &&
      unit.skipped_test_count() == unit.test_to_run_count())
    return 77;
  return status;
}
