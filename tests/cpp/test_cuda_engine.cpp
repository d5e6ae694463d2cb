// The cuBLAS engine on the same random problems as the CPU engine, checked
// against the float64 reference and against the CPU engine, with group sizes
// on the host and on the device (int64 and int32). Compiled wherever nvcc is;
// every test skips itself where no GPU is.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/builtin_engines.h"
#include "core/cpu/cpu_engine.h"
#include "core/cuda/cublas_engine.h"
#include "core/cuda/stream_resources.h"
#include "core/engine_registry.h"
#include "core/error.h"
#include "test_util.h"

// Every CUDA call of the tests goes through this.
#define ASSERT_CUDA(expr)                                                    \
  do {                                                                       \
    const cudaError_t gl_test_status_ = (expr);                              \
    ASSERT_EQ(gl_test_status_, cudaSuccess)                                  \
        << #expr << " failed: " << cudaGetErrorName(gl_test_status_) << " (" \
        << cudaGetErrorString(gl_test_status_) << ")";                       \
  } while (0)

// Skips the test where the runtime finds no GPU (no driver, or no device).
#define SKIP_WITHOUT_GPU()                                                      \
  do {                                                                          \
    std::string gl_test_why_;                                                   \
    if (!::gl_test::gpu_available(&gl_test_why_)) GTEST_SKIP() << gl_test_why_; \
  } while (0)

namespace gl_test {

bool gpu_available(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    *why = std::string("no usable CUDA device: cudaGetDeviceCount returned ") +
           cudaGetErrorName(status);
    (void)cudaGetLastError();  // clear the error so later calls start clean
    return false;
  }
  if (count == 0) {
    *why = "no CUDA device";
    return false;
  }
  return true;
}

namespace {

using grouped_linear::Device;
using grouped_linear::DeviceType;
using grouped_linear::Error;
using grouped_linear::ErrorKind;
using grouped_linear::ExecContext;
using grouped_linear::GroupedGemmEngine;

// The DeviceAllocator a binding would hand the engines, on plain cudaMalloc.
// It outlives every test: the per-stream cuBLAS workspaces allocated through
// it stay in use for the life of the process.
class CudaMallocAllocator final : public grouped_linear::DeviceAllocator {
 public:
  void* allocate(size_t bytes, int, void*) override {
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status != cudaSuccess)
      throw Error(ErrorKind::kRuntime,
                  std::string("cudaMalloc failed: ") + cudaGetErrorName(status));
    ++allocations_;
    return ptr;
  }
  void deallocate(void* ptr) override {
    (void)cudaFree(ptr);
    ++deallocations_;
  }
  int allocations() const { return allocations_; }
  int deallocations() const { return deallocations_; }

 private:
  int allocations_ = 0;
  int deallocations_ = 0;
};

CudaMallocAllocator& test_allocator() {
  static CudaMallocAllocator* allocator = new CudaMallocAllocator();  // never destroyed
  return *allocator;
}

// Where the engine finds the group sizes.
enum class SizesAt { kHost, kDeviceInt64, kDeviceInt32 };
const SizesAt kAllSizesAt[] = {SizesAt::kHost, SizesAt::kDeviceInt64, SizesAt::kDeviceInt32};

const char* sizes_at_name(SizesAt at) {
  switch (at) {
    case SizesAt::kHost: return "group sizes on the host";
    case SizesAt::kDeviceInt64: return "group sizes on the device, int64";
    case SizesAt::kDeviceInt32: return "group sizes on the device, int32";
  }
  return "?";
}

// Device memory for the duration of one test, streams, views over it.
class CudaTestBase {
 protected:
  void set_up_cuda() {
    ASSERT_CUDA(cudaGetDevice(&device_));
    // One non-blocking stream for the whole process: the engine must order
    // its work on the stream it is given, with no help from the legacy
    // default stream.
    static cudaStream_t shared = nullptr;
    if (shared == nullptr) ASSERT_CUDA(cudaStreamCreateWithFlags(&shared, cudaStreamNonBlocking));
    stream_ = shared;
  }
  void tear_down_cuda() {
    for (void* ptr : buffers_) (void)cudaFree(ptr);
    buffers_.clear();
  }

  Device device() const { return Device{DeviceType::kCUDA, device_}; }
  ExecContext context(cudaStream_t stream) const {
    ExecContext ctx;
    ctx.device = device();
    ctx.stream = stream;
    ctx.allocator = &test_allocator();
    return ctx;
  }
  ExecContext context() const { return context(stream_); }

  void malloc_device(size_t bytes, void** out) {
    *out = nullptr;
    ASSERT_CUDA(cudaMalloc(out, bytes));
    buffers_.push_back(*out);
  }
  // A device copy of the whole storage of `h` (padding poison included).
  void upload(const HostTensor& h, void** out) {
    *out = nullptr;
    if (h.bytes() == 0) return;  // a zero-size tensor: null, as frameworks give
    ASSERT_NO_FATAL_FAILURE(malloc_device(h.bytes(), out));
    ASSERT_CUDA(cudaMemcpyAsync(*out, h.data(), h.bytes(), cudaMemcpyHostToDevice, stream_));
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
  }
  void download(const void* dev, HostTensor* h) {
    if (h->bytes() == 0) return;
    ASSERT_CUDA(cudaMemcpyAsync(h->data(), dev, h->bytes(), cudaMemcpyDeviceToHost, stream_));
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
  }
  MatrixView on_device(MatrixView v, void* data) const {
    v.data = data;
    v.device = device();
    return v;
  }
  GroupedMatrixView on_device(GroupedMatrixView v, void* data) const {
    v.data = data;
    v.device = device();
    return v;
  }
  void set_splits(const std::vector<int64_t>& sizes, SizesAt at, GroupSizes* splits) {
    *splits = host_splits(sizes);
    if (at == SizesAt::kHost) return;
    void* dev = nullptr;
    const size_t count = sizes.size();
    if (at == SizesAt::kDeviceInt64) {
      ASSERT_NO_FATAL_FAILURE(malloc_device(count * sizeof(int64_t), &dev));
      ASSERT_CUDA(cudaMemcpy(dev, sizes.data(), count * sizeof(int64_t), cudaMemcpyHostToDevice));
      splits->device_dtype = DType::kInt64;
    } else {
      const std::vector<int32_t> narrow(sizes.begin(), sizes.end());
      ASSERT_NO_FATAL_FAILURE(malloc_device(count * sizeof(int32_t), &dev));
      ASSERT_CUDA(cudaMemcpy(dev, narrow.data(), count * sizeof(int32_t), cudaMemcpyHostToDevice));
      splits->device_dtype = DType::kInt32;
    }
    splits->host = nullptr;  // the engine has to read them from the device
    splits->device = dev;
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> buffers_;
};

GroupedGemmEngine& cpu_engine() { return grouped_linear::cpu::reference_engine(); }
GroupedGemmEngine& gpu_engine() { return grouped_linear::cuda::cublas_engine(); }

// Every engine this build registers for CUDA: the cuBLAS engine, and any
// other (e.g. the Hopper grouped engine) runs the same problems.
std::vector<GroupedGemmEngine*> cuda_engines(const Device& device) {
  grouped_linear::register_cuda_engines();
  std::vector<GroupedGemmEngine*> engines;
  for (const std::string& name : grouped_linear::engine_names(DeviceType::kCUDA))
    engines.push_back(&grouped_linear::engine_for(device, name));
  return engines;
}

// Outputs of the GPU and of the CPU engine, each within `tol` of the
// reference, are within 2 * tol of each other (triangle inequality).
void expect_close_to_cpu(const HostTensor& gpu, const HostTensor& cpu, const char* what) {
  const double diff = relative_difference(gpu, cpu);
  EXPECT_LE(diff, 2 * tolerance(gpu.dtype()))
      << what << ": the CUDA and the CPU engine differ by " << diff << " (relative)";
}

class CudaEngineTest : public ::testing::TestWithParam<Case>, protected CudaTestBase {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ASSERT_NO_FATAL_FAILURE(set_up_cuda());
    seed_ = seed_for(current_test_name());
    rng_.seed(seed_);
  }
  void TearDown() override { tear_down_cuda(); }

  void run_forward(bool with_bias) {
    SCOPED_TRACE(seed_message(seed_));
    for (GroupedGemmEngine* engine : cuda_engines(device()))
      for (SizesAt at : kAllSizesAt) {
        SCOPED_TRACE(std::string("engine ") + engine->name());
        SCOPED_TRACE(sizes_at_name(at));
        ForwardData d = make_forward(GetParam(), with_bias, rng_);
        void *x, *w, *bias, *y;
        ASSERT_NO_FATAL_FAILURE(upload(d.x, &x));
        ASSERT_NO_FATAL_FAILURE(upload(d.w, &w));
        ASSERT_NO_FATAL_FAILURE(upload(d.bias, &bias));
        ASSERT_NO_FATAL_FAILURE(upload(d.y, &y));  // poisoned
        ForwardProblem p = d.problem();
        p.x = on_device(p.x, x);
        p.w = on_device(p.w, w);
        p.bias = on_device(p.bias, bias);
        p.y = on_device(p.y, y);
        ASSERT_NO_FATAL_FAILURE(set_splits(d.sizes, at, &p.splits));
        engine->forward(p, context());
        ASSERT_CUDA(cudaStreamSynchronize(stream_));
        HostTensor y_gpu = d.y;
        ASSERT_NO_FATAL_FAILURE(download(y, &y_gpu));
        d.check(y_gpu);
        cpu_engine().forward(d.problem(), ExecContext{});
        expect_close_to_cpu(y_gpu, d.y, "Y");
      }
  }

  void run_dgrad() {
    SCOPED_TRACE(seed_message(seed_));
    for (GroupedGemmEngine* engine : cuda_engines(device()))
      for (SizesAt at : kAllSizesAt) {
        SCOPED_TRACE(std::string("engine ") + engine->name());
        SCOPED_TRACE(sizes_at_name(at));
        DgradData d = make_dgrad(GetParam(), rng_);
        void *dy, *w, *dx;
        ASSERT_NO_FATAL_FAILURE(upload(d.dy, &dy));
        ASSERT_NO_FATAL_FAILURE(upload(d.w, &w));
        ASSERT_NO_FATAL_FAILURE(upload(d.dx, &dx));
        DgradProblem p = d.problem();
        p.dy = on_device(p.dy, dy);
        p.w = on_device(p.w, w);
        p.dx = on_device(p.dx, dx);
        ASSERT_NO_FATAL_FAILURE(set_splits(d.sizes, at, &p.splits));
        engine->dgrad(p, context());
        ASSERT_CUDA(cudaStreamSynchronize(stream_));
        HostTensor dx_gpu = d.dx;
        ASSERT_NO_FATAL_FAILURE(download(dx, &dx_gpu));
        d.check(dx_gpu);
        cpu_engine().dgrad(d.problem(), ExecContext{});
        expect_close_to_cpu(dx_gpu, d.dx, "dX");
      }
  }

  void run_wgrad(WgradMode mode) {
    SCOPED_TRACE(seed_message(seed_));
    for (GroupedGemmEngine* engine : cuda_engines(device()))
      for (SizesAt at : kAllSizesAt) {
        SCOPED_TRACE(std::string("engine ") + engine->name());
        SCOPED_TRACE(sizes_at_name(at));
        WgradData d = make_wgrad(GetParam(), mode, rng_);
        void *dy, *x, *dw, *db;
        ASSERT_NO_FATAL_FAILURE(upload(d.dy, &dy));
        ASSERT_NO_FATAL_FAILURE(upload(d.x, &x));
        ASSERT_NO_FATAL_FAILURE(upload(d.dw, &dw));  // poisoned, or the prior main_grad
        ASSERT_NO_FATAL_FAILURE(upload(d.db, &db));
        WgradProblem p = d.problem();
        p.dy = on_device(p.dy, dy);
        p.x = on_device(p.x, x);
        if (d.has_dw()) p.dw = on_device(p.dw, dw);
        if (d.has_db()) p.dbias = on_device(p.dbias, db);
        ASSERT_NO_FATAL_FAILURE(set_splits(d.sizes, at, &p.splits));
        engine->wgrad(p, context());
        ASSERT_CUDA(cudaStreamSynchronize(stream_));
        HostTensor dw_gpu = d.dw, db_gpu = d.db;
        ASSERT_NO_FATAL_FAILURE(download(dw, &dw_gpu));
        ASSERT_NO_FATAL_FAILURE(download(db, &db_gpu));
        d.check(dw_gpu, db_gpu);
        cpu_engine().wgrad(d.problem(), ExecContext{});
        if (d.has_dw()) expect_close_to_cpu(dw_gpu, d.dw, "dW");
        if (d.has_db()) expect_close_to_cpu(db_gpu, d.db, "db");
      }
  }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
};

TEST_P(CudaEngineTest, ForwardWithoutBias) { run_forward(false); }
TEST_P(CudaEngineTest, ForwardWithBias) { run_forward(true); }
TEST_P(CudaEngineTest, Dgrad) { run_dgrad(); }
TEST_P(CudaEngineTest, WgradWrite) { run_wgrad(WgradMode::kDw); }
TEST_P(CudaEngineTest, WgradWriteWithBiasGrad) { run_wgrad(WgradMode::kDwAndDbias); }
TEST_P(CudaEngineTest, WgradBiasGradOnly) { run_wgrad(WgradMode::kDbiasOnly); }
TEST_P(CudaEngineTest, WgradAccumulate) { run_wgrad(WgradMode::kAccumulate); }
TEST_P(CudaEngineTest, WgradAccumulateWithBiasGrad) { run_wgrad(WgradMode::kAccumulateDbias); }

INSTANTIATE_TEST_SUITE_P(Cases, CudaEngineTest, ::testing::ValuesIn(all_cases()), case_param_name);

class CudaEngineMisc : public ::testing::Test, protected CudaTestBase {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ASSERT_NO_FATAL_FAILURE(set_up_cuda());
  }
  void TearDown() override { tear_down_cuda(); }
};

TEST_F(CudaEngineMisc, CublasIsRegistered) {
  grouped_linear::register_cuda_engines();
  grouped_linear::register_cuda_engines();  // idempotent
  const std::vector<std::string> names = grouped_linear::engine_names(DeviceType::kCUDA);
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(std::count(names.begin(), names.end(), "cublas"), 1);
  // The first registered is the default; cuBLAS is always there by name.
  EXPECT_EQ(grouped_linear::engine_for(device()).name(), names.front());
  EXPECT_EQ(&grouped_linear::engine_for(device(), "cublas"), &gpu_engine());
  {
    // An override pins cuBLAS until it is cleared.
    grouped_linear::set_engine_override(DeviceType::kCUDA, "cublas");
    EXPECT_EQ(&grouped_linear::engine_for(device()), &gpu_engine());
    grouped_linear::set_engine_override(DeviceType::kCUDA, "");
    EXPECT_EQ(grouped_linear::engine_for(device()).name(), names.front());
  }
  try {
    grouped_linear::engine_for(device(), "cpu_reference");
    ADD_FAILURE() << "a CPU engine was handed out for a CUDA device";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_NE(std::string(e.what()).find("cublas"), std::string::npos) << e.what();
  }
}

// The cuBLAS engine reads device group sizes back (with a sync) and checks
// them: bad ones fail with the same error as host sizes would, before
// anything is written.
TEST_F(CudaEngineMisc, BadDeviceGroupSizesThrowBeforeWriting) {
  const uint32_t seed = seed_for(current_test_name());
  SCOPED_TRACE(seed_message(seed));
  std::mt19937 rng(seed);
  const Case c{
      {DType::kFloat16, DType::kFloat16}, {"small", 12, 8, 6, 3, 0}, Split::kRandomWithEmpty};
  const std::vector<std::vector<int64_t>> bad = {{12, -1, 1}, {6, 0, 7}, {2, 2, 2}};
  for (const auto& sizes : bad) {
    for (SizesAt at : {SizesAt::kDeviceInt64, SizesAt::kDeviceInt32}) {
      SCOPED_TRACE(sizes_text(sizes));
      SCOPED_TRACE(sizes_at_name(at));
      ForwardData d = make_forward(c, /*with_bias=*/true, rng);
      void *x, *w, *bias, *y;
      ASSERT_NO_FATAL_FAILURE(upload(d.x, &x));
      ASSERT_NO_FATAL_FAILURE(upload(d.w, &w));
      ASSERT_NO_FATAL_FAILURE(upload(d.bias, &bias));
      ASSERT_NO_FATAL_FAILURE(upload(d.y, &y));
      ForwardProblem p = d.problem();
      p.x = on_device(p.x, x);
      p.w = on_device(p.w, w);
      p.bias = on_device(p.bias, bias);
      p.y = on_device(p.y, y);
      ASSERT_NO_FATAL_FAILURE(set_splits(sizes, at, &p.splits));
      try {
        gpu_engine().forward(p, context());
        ADD_FAILURE() << "bad device group sizes were accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kValue) << e.what();
        EXPECT_NE(std::string(e.what()).find("m_splits"), std::string::npos) << e.what();
      }
      ASSERT_CUDA(cudaStreamSynchronize(stream_));
      HostTensor y_after = d.y;
      ASSERT_NO_FATAL_FAILURE(download(y, &y_after));
      for (int64_t i = 0; i < y_after.storage_elements(); ++i)
        ASSERT_TRUE(y_after.is_poison(i)) << "Y element " << i << " written by a call that threw";
    }
  }
}

// Host-side validation runs before the engine touches the GPU.
TEST_F(CudaEngineMisc, ValidationErrors) {
  const uint32_t seed = seed_for(current_test_name());
  std::mt19937 rng(seed);
  const Case c{
      {DType::kBFloat16, DType::kBFloat16}, {"small", 6, 8, 6, 2, 0}, Split::kRandomWithEmpty};
  ForwardData d = make_forward(c, /*with_bias=*/false, rng);
  ForwardProblem p = d.problem();  // host memory described as CUDA below
  p.x.device = p.y.device = device();
  p.w.device = Device{};  // the weight on the CPU
  try {
    gpu_engine().forward(p, context());
    ADD_FAILURE() << "a device mismatch was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_NE(std::string(e.what()).find("weight"), std::string::npos) << e.what();
  }
}

// One cuBLAS handle and workspace per (device, stream), made on first use and
// found again after.
TEST_F(CudaEngineMisc, StreamResourcesOnePerStream) {
  namespace cuda = grouped_linear::cuda;
  cudaStream_t a = nullptr, b = nullptr;
  // Never destroyed: their entries live as long as the process.
  ASSERT_CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  ASSERT_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  CudaMallocAllocator& alloc = test_allocator();

  const size_t count0 = cuda::stream_resources_count();
  const int allocations0 = alloc.allocations();
  cuda::StreamResources& ra = cuda::stream_resources(device_, a, &alloc);
  EXPECT_EQ(cuda::stream_resources_count(), count0 + 1);
  EXPECT_EQ(ra.device, device_);
  EXPECT_EQ(ra.stream, a);
  EXPECT_NE(ra.cublas, nullptr);
  EXPECT_NE(ra.workspace, nullptr);
  EXPECT_EQ(ra.workspace_bytes, cuda::kCublasWorkspaceBytes);
  EXPECT_EQ(alloc.allocations(), allocations0 + 1);  // the workspace, through our allocator

  cuda::StreamResources& ra_again = cuda::stream_resources(device_, a, &alloc);
  EXPECT_EQ(&ra_again, &ra);
  EXPECT_EQ(cuda::stream_resources_count(), count0 + 1);
  EXPECT_EQ(alloc.allocations(), allocations0 + 1);

  cuda::StreamResources& rb = cuda::stream_resources(device_, b, &alloc);
  EXPECT_NE(&rb, &ra);
  EXPECT_NE(rb.cublas, ra.cublas);
  EXPECT_NE(rb.workspace, ra.workspace);
  EXPECT_EQ(cuda::stream_resources_count(), count0 + 2);
  EXPECT_EQ(alloc.allocations(), allocations0 + 2);

  // The engine goes through the same table: calls on `a` add nothing; the
  // first call on the legacy default stream adds one entry, the second none.
  std::mt19937 rng(seed_for(current_test_name()));
  const Case c{
      {DType::kFloat32, DType::kFloat32}, {"small", 10, 8, 4, 2, 0}, Split::kRandomWithEmpty};
  ForwardData d = make_forward(c, /*with_bias=*/true, rng);
  void *x, *w, *bias, *y;
  ASSERT_NO_FATAL_FAILURE(upload(d.x, &x));
  ASSERT_NO_FATAL_FAILURE(upload(d.w, &w));
  ASSERT_NO_FATAL_FAILURE(upload(d.bias, &bias));
  ASSERT_NO_FATAL_FAILURE(upload(d.y, &y));
  ForwardProblem p = d.problem();
  p.x = on_device(p.x, x);
  p.w = on_device(p.w, w);
  p.bias = on_device(p.bias, bias);
  p.y = on_device(p.y, y);
  gpu_engine().forward(p, context(a));
  gpu_engine().forward(p, context(a));
  ASSERT_CUDA(cudaStreamSynchronize(a));
  EXPECT_EQ(cuda::stream_resources_count(), count0 + 2);

  // No other test uses the legacy default stream.
  gpu_engine().forward(p, context(nullptr));
  EXPECT_EQ(cuda::stream_resources_count(), count0 + 3);
  gpu_engine().forward(p, context(nullptr));
  EXPECT_EQ(cuda::stream_resources_count(), count0 + 3);
  EXPECT_EQ(alloc.allocations(), allocations0 + 3);
  ASSERT_CUDA(cudaDeviceSynchronize());

  HostTensor y_gpu = d.y;
  ASSERT_NO_FATAL_FAILURE(download(y, &y_gpu));
  d.check(y_gpu);
  EXPECT_EQ(alloc.deallocations(), 0);  // workspaces are never given back
}

}  // namespace
}  // namespace gl_test

// gtest's main, plus one thing for CTest: when every test that ran skipped
// itself (no GPU here), exit with 77, which CMakeLists.txt declares as
// SKIP_RETURN_CODE, so CTest reports the binary as skipped, not passed.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  if (status == 0 && unit.test_to_run_count() > 0 &&
      unit.skipped_test_count() == unit.test_to_run_count())
    return 77;
  return status;
}
