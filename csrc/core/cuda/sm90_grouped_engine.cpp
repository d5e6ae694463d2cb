#include "core/cuda/sm90_grouped_engine.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/cuda/cublas_engine.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_info.h"
#include "core/cuda/group_kernels.h"
#include "core/cuda/sm90/grouped_gemm_sm90.h"

namespace grouped_linear::cuda {
namespace {

using sm90::GroupedLaunch;
using sm90::KernelEntry;
using sm90::Role;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool packed(const MatrixView& m) { return m.row_stride == m.cols && aligned16(m.data); }
bool packed(const GroupedMatrixView& m) {
  return m.row_stride == m.cols && m.group_stride == m.rows * m.cols && aligned16(m.data);
}

// Shapes every kernel of the family accepts: 16-byte aligned rows and group
// starts (K and N multiples of 8 for 16-bit types) and a group count the
// in-kernel scan covers.
bool shape_fits(int64_t n, int64_t k, const GroupSizes& splits) {
  const int64_t limit = splits.host != nullptr ? sm90::kMaxHostGroups : sm90::kMaxGroups;
  return n > 0 && k > 0 && n % 8 == 0 && k % 8 == 0 && n < (int64_t{1} << 31) &&
         k < (int64_t{1} << 31) && splits.num_groups >= 1 && splits.num_groups <= limit;
}

// Device memory for one launch, from the caller's allocator, given back right
// after the launch is queued. The caching allocator orders reuse on the
// stream, and under CUDA graph capture the block belongs to the graph's pool,
// so no buffer outlives what it is used by.
class LaunchWorkspace {
 public:
  LaunchWorkspace(const ExecContext& ctx, size_t bytes) : allocator_(ctx.allocator) {
    GL_CHECK(allocator_ != nullptr, "no device allocator was given for the grouped GEMM");
    ptr_ = allocator_->allocate(std::max<size_t>(bytes, 256), ctx.device.index, ctx.stream);
  }
  ~LaunchWorkspace() { allocator_->deallocate(ptr_); }
  LaunchWorkspace(const LaunchWorkspace&) = delete;
  LaunchWorkspace& operator=(const LaunchWorkspace&) = delete;
  void* get() const { return ptr_; }

 private:
  DeviceAllocator* allocator_;
  void* ptr_ = nullptr;
};

GroupedLaunch make_launch(Role role, const GroupSizes& splits, int64_t rows, int64_t n, int64_t k,
                          const ExecContext& ctx) {
  GroupedLaunch launch;
  launch.role = role;
  launch.num_groups = static_cast<int>(splits.num_groups);
  launch.total_rows = rows;
  launch.n = n;
  launch.k = k;
  launch.device_sizes = splits.host != nullptr ? nullptr : splits.device;
  launch.device_sizes_int64 = splits.device_dtype == DType::kInt64;
  launch.host_sizes = splits.host;
  launch.device = ctx.device.index;
  launch.sm_count = device_info(ctx.device.index).sm_count;
  launch.stream = static_cast<cudaStream_t>(ctx.stream);
  return launch;
}

void run(const KernelEntry& kernel, const GroupedLaunch& launch, const ExecContext& ctx) {
  LaunchWorkspace workspace(ctx, kernel.workspace_size(launch));
  kernel.run(launch, workspace.get());
}

const KernelEntry* pick(Role role, DType input, DType output, const GroupSizes& splits,
                        int64_t rows, int64_t n, int64_t k) {
  sm90::GroupShape shape;
  shape.total_rows = rows;
  shape.num_groups = static_cast<int>(splits.num_groups);
  shape.host_sizes = splits.host;
  shape.n = n;
  shape.k = k;
  return sm90::select_kernel(role, input, output, shape);
}

std::vector<int64_t> host_offsets(const GroupSizes& splits) {
  std::vector<int64_t> offsets(static_cast<size_t>(splits.num_groups) + 1, 0);
  for (int64_t g = 0; g < splits.num_groups; ++g) offsets[g + 1] = offsets[g] + splits.host[g];
  return offsets;
}

class Sm90GroupedEngine final : public GroupedGemmEngine {
 public:
  const char* name() const override { return "sm90_grouped"; }

  bool available(const Device& device) const override {
    if (device.type != DeviceType::kCUDA) return false;
    const DeviceInfo& info = device_info(device.index);
    return info.major == 9 && info.minor == 0;  // sm_90a code runs on sm_90 only
  }

  std::vector<std::string> kernel_names() const override {
    std::vector<std::string> names;
    for (const KernelEntry& e : sm90::all_kernels()) names.emplace_back(e.name);
    return names;
  }

  void set_kernel_override(const std::string& name) override { sm90::set_kernel_override(name); }

  void forward(const ForwardProblem& p, const ExecContext& ctx) override {
    const KernelEntry* kernel =
        pick(Role::kForward, p.x.dtype, p.y.dtype, p.splits, p.x.rows, p.w.rows, p.w.cols);
    if (kernel == nullptr || !shape_fits(p.w.rows, p.w.cols, p.splits) || !packed(p.x) || !packed(p.y) ||
        !packed(p.w) || !available(ctx.device)) {
      cublas_engine().forward(p, ctx);
      return;
    }
    validate(p);
    GroupedLaunch launch = make_launch(Role::kForward, p.splits, p.x.rows, p.w.rows, p.w.cols, ctx);
    launch.a = p.x.data;
    launch.b = p.w.data;
    launch.d = p.y.data;
    if (p.bias.present) {
      // Y starts as each group's bias; the GEMM adds X·Wᵀ to it (beta = 1).
      fill_bias(p, launch.stream);
      launch.beta = 1.f;
    }
    run(*kernel, launch, ctx);
  }

  void dgrad(const DgradProblem& p, const ExecContext& ctx) override {
    const KernelEntry* kernel =
        pick(Role::kDgrad, p.dy.dtype, p.dx.dtype, p.splits, p.dy.rows, p.w.rows, p.w.cols);
    if (kernel == nullptr || !shape_fits(p.w.rows, p.w.cols, p.splits) || !packed(p.dy) ||
        !packed(p.dx) || !packed(p.w) || !available(ctx.device)) {
      cublas_engine().dgrad(p, ctx);
      return;
    }
    validate(p);
    GroupedLaunch launch = make_launch(Role::kDgrad, p.splits, p.dy.rows, p.w.rows, p.w.cols, ctx);
    launch.a = p.dy.data;
    launch.b = p.w.data;
    launch.d = p.dx.data;
    run(*kernel, launch, ctx);
  }

  void wgrad(const WgradProblem& p, const ExecContext& ctx) override {
    const DType out = p.dw.present ? p.dw.dtype : p.x.dtype;
    const KernelEntry* kernel =
        pick(Role::kWgrad, p.x.dtype, out, p.splits, p.x.rows, p.dy.cols, p.x.cols);
    if (kernel == nullptr || !shape_fits(p.dy.cols, p.x.cols, p.splits) || !packed(p.dy) ||
        !packed(p.x) || (p.dw.present && !packed(p.dw)) || !available(ctx.device)) {
      cublas_engine().wgrad(p, ctx);
      return;
    }
    validate(p);
    const cudaStream_t stream = static_cast<cudaStream_t>(ctx.stream);
    if (p.dbias.present) bias_grad(p, stream);
    if (!p.dw.present) return;
    GroupedLaunch launch = make_launch(Role::kWgrad, p.splits, p.x.rows, p.dy.cols, p.x.cols, ctx);
    launch.a = p.dy.data;
    launch.b = p.x.data;
    launch.d = p.dw.data;
    launch.beta = p.accumulate ? 1.f : 0.f;
    run(*kernel, launch, ctx);
  }

 private:
  static void fill_bias(const ForwardProblem& p, cudaStream_t stream) {
    if (p.splits.host != nullptr) {
      for_each_group_chunk(host_offsets(p.splits), [&](int64_t g0, int count, const int64_t* rows) {
        launch_fill_bias_rows(p.y, p.bias, g0, count, rows, stream);
      });
    } else {
      launch_fill_bias_rows_device_sizes(p.y, p.bias, p.splits.device,
                                         p.splits.device_dtype == DType::kInt64,
                                         static_cast<int>(p.splits.num_groups), stream);
    }
  }

  static void bias_grad(const WgradProblem& p, cudaStream_t stream) {
    if (p.splits.host != nullptr) {
      for_each_group_chunk(host_offsets(p.splits), [&](int64_t g0, int count, const int64_t* rows) {
        launch_bias_grad(p.dy, p.dbias, g0, count, rows, stream);
      });
    } else {
      launch_bias_grad_device_sizes(p.dy, p.dbias, p.splits.device,
                                    p.splits.device_dtype == DType::kInt64,
                                    static_cast<int>(p.splits.num_groups), stream);
    }
  }
};

}  // namespace

GroupedGemmEngine& sm90_grouped_engine() {
  static Sm90GroupedEngine engine;
  return engine;
}

}  // namespace grouped_linear::cuda
