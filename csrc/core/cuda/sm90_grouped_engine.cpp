#include "core/cuda/sm90_grouped_engine.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/cuda/cublas_engine.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_info.h"
#include "core/cuda/group_kernels.h"
#include "core/cuda/sm90/grouped_gemm_sm90.h"
#include "core/cuda/sm90/l2_promotion.h"
#include "core/cuda/sm90/split_reduction.h"
#include "core/cuda/sum_partials.h"
#include "core/fp8/fp8_gemm.h"
#include "core/log.h"

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

// The epilogue reads group g's bias at bias + g * N, in the output dtype.
bool bias_fits(const GroupedMatrixView& bias, const MatrixView& y) {
  return bias.dtype == y.dtype && bias.rows == 1 && bias.cols == y.cols &&
         bias.group_stride == y.cols;
}

// For GROUPED_LINEAR_LOG_LEVEL=info: the kernel that runs and what it was
// chosen from, or why a problem goes to cuBLAS (checked in the order above).
std::string kernel_choice(const KernelEntry& kernel, const GroupedLaunch& launch) {
  const int64_t groups = std::max(launch.num_groups, 1);
  return detail::concat("sm90_grouped kernel ", kernel.name, " (", kernel.tile_m,
                        "-row tiles: N=", launch.n, ", K=", launch.k, ", ", launch.num_groups,
                        " groups average ", launch.total_rows / groups, " rows, sizes on the ",
                        launch.host_sizes != nullptr ? "host)" : "device)");
}
std::string cublas_reason(bool on_sm90, const KernelEntry* kernel, DType input, int64_t n,
                          int64_t k, const GroupSizes& splits) {
  if (!on_sm90) return "the device is not sm_90";
  if (kernel == nullptr) return detail::concat("no grouped kernel for ", dtype_name(input));
  if (n <= 0 || k <= 0) return detail::concat("empty product: N=", n, ", K=", k);
  if (k % 8 != 0) return detail::concat("K=", k, " not a multiple of 8");
  if (n % 8 != 0) return detail::concat("N=", n, " not a multiple of 8");
  if (!shape_fits(n, k, splits))
    return detail::concat(splits.num_groups, " groups or N=", n, ", K=", k,
                          " beyond what the kernels cover");
  return "an operand is strided or not 16-byte aligned, or the bias layout differs from the output";
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

void run(const KernelEntry& kernel, GroupedLaunch launch, const ExecContext& ctx) {
  launch.raster_along_n = sm90::raster_along_n(kernel, launch);
  launch.l2_promotion_bytes = sm90::l2_promotion_bytes();
  LaunchWorkspace workspace(ctx, kernel.workspace_size(launch));
  kernel.run(launch, workspace.get());
}

static_assert(sm90::kPieceAlign % fp8::kGroupAlign == 0,
              "FP8 pieces must keep the column-wise copies' group starts");

// A wgrad whose groups' reduction is split into `pieces` (sm90/split_reduction.h,
// `sizes` from piece_sizes): `partial` writes each piece's float32 gradient
// into a workspace, then one pass sums each group's pieces into launch.d
// (adding launch.d's values when beta = 1), in `out`'s dtype.
void run_pieces(const KernelEntry& partial, GroupedLaunch launch, const std::vector<int64_t>& sizes,
                int pieces, DType out, const ExecContext& ctx) {
  const int groups = launch.num_groups;
  const int64_t elements = launch.n * launch.k;
  LaunchWorkspace partials(ctx, sizes.size() * static_cast<size_t>(elements) * sizeof(float));
  void* d = launch.d;
  const bool accumulate = launch.beta != 0.f;
  launch.num_groups = static_cast<int>(sizes.size());
  launch.host_sizes = sizes.data();
  launch.d = partials.get();
  launch.beta = 0.f;
  GL_LOG_INFO("wgrad: reduction split in ", pieces, " pieces: ", kernel_choice(partial, launch));
  run(partial, launch, ctx);
  launch_sum_partials(static_cast<const float*>(partials.get()), groups, pieces, elements, d, out,
                      accumulate, launch.stream);
}

// `kernel`'s wgrad split along its reduction, where split_reduction.h says
// to and `pick_partial` finds a float32 kernel for the pieces' sizes; false
// where it did not run.
template <class PickPartial>
bool run_split(const KernelEntry& kernel, const GroupedLaunch& launch, DType out,
               const ExecContext& ctx, PickPartial pick_partial) {
  const int pieces = sm90::reduction_pieces(kernel.tile_m, kernel.tile_n, launch);
  if (pieces <= 1) return false;
  const std::vector<int64_t> sizes =
      sm90::piece_sizes(launch.host_sizes, launch.num_groups, pieces);
  const KernelEntry* partial =
      pick_partial(GroupSizes{static_cast<int64_t>(sizes.size()), sizes.data()});
  if (partial == nullptr) return false;
  run_pieces(*partial, launch, sizes, pieces, out, ctx);
  return true;
}

const KernelEntry* pick(Role role, DType input, DType output, const GroupSizes& splits,
                        int64_t rows, int64_t n, int64_t k, bool accumulate = false) {
  sm90::GroupShape shape;
  shape.accumulate = accumulate;
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

// FP8 operands the kernels read: K-major rows 16-byte aligned, so the
// reduction dimension and the rows' starts are multiples of 16 one-byte
// elements. Column-wise copies: rows `row_stride` apart, a multiple of 16.
// Scales: per-tensor on both operands, or blockwise on both
// (Float8BlockScaling: 1 x 128 activation blocks, 128 x 128 weight blocks);
// any other mix is emulated.
bool fp8_rows_fit(const MatrixView& m) {
  return m.data != nullptr && m.row_stride % 16 == 0 && m.cols <= m.row_stride && aligned16(m.data);
}
bool fp8_per_tensor(const fp8::ScaleView& scale) {
  return scale.layout == fp8::ScaleLayout::kPerTensor && scale.scale_inv != nullptr;
}
bool fp8_blocks(const fp8::ScaleView& scale, int block_rows) {
  return scale.layout == fp8::ScaleLayout::kBlock && scale.scale_inv != nullptr &&
         scale.block_rows == block_rows && scale.block_cols == 128;
}
enum class Fp8Scaling { kPerTensor, kBlock, kUnsupported };
Fp8Scaling fp8_scaling(const fp8::ScaleView& a, const fp8::ScaleView& b, int b_block_rows) {
  if (fp8_per_tensor(a) && fp8_per_tensor(b)) return Fp8Scaling::kPerTensor;
  if (fp8_blocks(a, 1) && fp8_blocks(b, b_block_rows)) return Fp8Scaling::kBlock;
  return Fp8Scaling::kUnsupported;
}
bool fp8_shape_fits(int64_t n, int64_t k, const GroupSizes& splits) {
  return n % 16 == 0 && k % 16 == 0 && shape_fits(n, k, splits);
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
  void set_tile_order(const std::string& order) override { sm90::set_tile_order(order); }
  void set_l2_promotion(const std::string& promotion) override {
    sm90::set_l2_promotion(promotion);
  }

  // FP8: one launch per role, as for 16-bit inputs; the per-group factor
  // a_scale_inv * b_scale_inv is formed by the kernel's setup, or, with
  // block scales, each group's scale pointers and layouts.
  bool runs_fp8(const fp8::ForwardProblem& p, const ExecContext& ctx) const override {
    return available(ctx.device) && fp8_forward_kernel(p) != nullptr &&
           fp8_shape_fits(p.w.rowwise.rows, p.w.rowwise.cols, p.splits) && packed(p.x.rowwise) &&
           p.x.rowwise.cols == p.w.rowwise.cols && packed(p.w.rowwise) && packed(p.y) &&
           (!p.bias.present || bias_fits(p.bias, p.y));
  }
  bool runs_fp8(const fp8::DgradProblem& p, const ExecContext& ctx) const override {
    // w.columnwise is [G][K, N]: rows = K, cols = N.
    return available(ctx.device) && fp8_dgrad_kernel(p) != nullptr &&
           fp8_shape_fits(p.w.columnwise.cols, p.w.columnwise.rows, p.splits) &&
           packed(p.dy.rowwise) && p.dy.rowwise.cols == p.w.columnwise.cols &&
           packed(p.w.columnwise) && packed(p.dx);
  }
  bool runs_fp8(const fp8::WgradProblem& p, const ExecContext& ctx) const override {
    // dy.columnwise is [N, padded T], x.columnwise [K, padded T].
    return available(ctx.device) && p.dw.present && fp8_wgrad_kernel(p) != nullptr &&
           fp8_shape_fits(p.dy.columnwise.rows, p.x.columnwise.rows, p.splits) &&
           fp8_rows_fit(p.dy.columnwise) && fp8_rows_fit(p.x.columnwise) &&
           p.dy.columnwise.row_stride == p.x.columnwise.row_stride && packed(p.dw);
  }

  void fp8_forward(const fp8::ForwardProblem& p, const ExecContext& ctx) override {
    GL_CHECK(runs_fp8(p, ctx), "sm90_grouped: no FP8 forward kernel for this problem");
    const int64_t n = p.w.rowwise.rows, k = p.w.rowwise.cols;
    GroupedLaunch launch = make_launch(Role::kForward, p.splits, p.x.rowwise.rows, n, k, ctx);
    launch.a = p.x.rowwise.data;
    launch.b = p.w.rowwise.data;
    launch.d = p.y.data;
    if (p.bias.present) launch.bias = p.bias.data;
    launch.a_scale_inv = p.x.rowwise_scale.scale_inv;
    launch.b_scale_inv = p.w.rowwise_scale.scale_inv;
    launch.b_scale_per_group = true;
    GL_LOG_INFO("forward: FP8 ", kernel_choice(*fp8_forward_kernel(p), launch));
    run(*fp8_forward_kernel(p), launch, ctx);
  }

  void fp8_dgrad(const fp8::DgradProblem& p, const ExecContext& ctx) override {
    GL_CHECK(runs_fp8(p, ctx), "sm90_grouped: no FP8 dgrad kernel for this problem");
    const int64_t k = p.w.columnwise.rows, n = p.w.columnwise.cols;
    GroupedLaunch launch = make_launch(Role::kDgrad, p.splits, p.dy.rowwise.rows, n, k, ctx);
    launch.a = p.dy.rowwise.data;
    launch.b = p.w.columnwise.data;
    launch.d = p.dx.data;
    launch.a_scale_inv = p.dy.rowwise_scale.scale_inv;
    launch.b_scale_inv = p.w.columnwise_scale.scale_inv;
    launch.b_scale_per_group = true;
    GL_LOG_INFO("dgrad: FP8 ", kernel_choice(*fp8_dgrad_kernel(p), launch));
    run(*fp8_dgrad_kernel(p), launch, ctx);
  }

  void fp8_wgrad(const fp8::WgradProblem& p, const ExecContext& ctx) override {
    GL_CHECK(runs_fp8(p, ctx), "sm90_grouped: no FP8 wgrad kernel for this problem");
    const int64_t n = p.dy.columnwise.rows, k = p.x.columnwise.rows;
    GroupedLaunch launch = make_launch(Role::kWgrad, p.splits, p.total_rows, n, k, ctx);
    launch.a = p.dy.columnwise.data;
    launch.b = p.x.columnwise.data;
    launch.d = p.dw.data;
    launch.beta = p.accumulate ? 1.f : 0.f;
    launch.a_scale_inv = p.dy.columnwise_scale.scale_inv;
    launch.b_scale_inv = p.x.columnwise_scale.scale_inv;
    launch.b_scale_per_group = false;
    launch.padded_columns = p.dy.columnwise.row_stride;
    const KernelEntry& kernel = *fp8_wgrad_kernel(p);
    // Per-tensor scales only: block scales sit at each group's own columns.
    if (!kernel.block_scaled &&
        run_split(kernel, launch, p.dw.dtype, ctx, [&](const GroupSizes& pieces) {
          return fp8_pick(Role::kWgrad, p.dy.columnwise.dtype, p.x.columnwise.dtype,
                          DType::kFloat32, Fp8Scaling::kPerTensor, p.split_accumulator, pieces,
                          p.total_rows, n, k);
        }))
      return;
    GL_LOG_INFO("wgrad: FP8 ", kernel_choice(kernel, launch));
    run(kernel, launch, ctx);
  }

  void forward(const ForwardProblem& p, const ExecContext& ctx) override {
    const KernelEntry* kernel =
        pick(Role::kForward, p.x.dtype, p.y.dtype, p.splits, p.x.rows, p.w.rows, p.w.cols);
    if (kernel == nullptr || !shape_fits(p.w.rows, p.w.cols, p.splits) || !packed(p.x) ||
        !packed(p.y) || !packed(p.w) || (p.bias.present && !bias_fits(p.bias, p.y)) ||
        !available(ctx.device)) {
      GL_LOG_INFO(
          "forward: sm90_grouped fell back to cublas: ",
          cublas_reason(available(ctx.device), kernel, p.x.dtype, p.w.rows, p.w.cols, p.splits));
      cublas_engine().forward(p, ctx);
      return;
    }
    validate(p);
    GroupedLaunch launch = make_launch(Role::kForward, p.splits, p.x.rows, p.w.rows, p.w.cols, ctx);
    launch.a = p.x.data;
    launch.b = p.w.data;
    launch.d = p.y.data;
    if (p.bias.present) launch.bias = p.bias.data;  // added in the kernel's epilogue
    GL_LOG_INFO("forward: ", kernel_choice(*kernel, launch));
    run(*kernel, launch, ctx);
  }

  void dgrad(const DgradProblem& p, const ExecContext& ctx) override {
    const KernelEntry* kernel =
        pick(Role::kDgrad, p.dy.dtype, p.dx.dtype, p.splits, p.dy.rows, p.w.rows, p.w.cols);
    if (kernel == nullptr || !shape_fits(p.w.rows, p.w.cols, p.splits) || !packed(p.dy) ||
        !packed(p.dx) || !packed(p.w) || !available(ctx.device)) {
      GL_LOG_INFO(
          "dgrad: sm90_grouped fell back to cublas: ",
          cublas_reason(available(ctx.device), kernel, p.dy.dtype, p.w.rows, p.w.cols, p.splits));
      cublas_engine().dgrad(p, ctx);
      return;
    }
    validate(p);
    GroupedLaunch launch = make_launch(Role::kDgrad, p.splits, p.dy.rows, p.w.rows, p.w.cols, ctx);
    launch.a = p.dy.data;
    launch.b = p.w.data;
    launch.d = p.dx.data;
    GL_LOG_INFO("dgrad: ", kernel_choice(*kernel, launch));
    run(*kernel, launch, ctx);
  }

  void wgrad(const WgradProblem& p, const ExecContext& ctx) override {
    const DType out = p.dw.present ? p.dw.dtype : p.x.dtype;
    const KernelEntry* kernel =
        pick(Role::kWgrad, p.x.dtype, out, p.splits, p.x.rows, p.dy.cols, p.x.cols, p.accumulate);
    if (kernel == nullptr || !shape_fits(p.dy.cols, p.x.cols, p.splits) || !packed(p.dy) ||
        !packed(p.x) || (p.dw.present && !packed(p.dw)) || !available(ctx.device)) {
      GL_LOG_INFO(
          "wgrad: sm90_grouped fell back to cublas: ",
          cublas_reason(available(ctx.device), kernel, p.x.dtype, p.dy.cols, p.x.cols, p.splits));
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
    if (run_split(*kernel, launch, out, ctx, [&](const GroupSizes& pieces) {
          return pick(Role::kWgrad, p.x.dtype, DType::kFloat32, pieces, p.x.rows, p.dy.cols,
                      p.x.cols);
        }))
      return;
    GL_LOG_INFO("wgrad: ", kernel_choice(*kernel, launch));
    run(*kernel, launch, ctx);
  }

 private:
  // The kernel for the operands' formats and scaling; null when none is
  // built or the scales are neither both per-tensor nor both blockwise.
  static const KernelEntry* fp8_pick(Role role, DType a, DType b, DType out, Fp8Scaling scaling,
                                     bool split_accumulator, const GroupSizes& splits, int64_t rows,
                                     int64_t n, int64_t k, bool accumulate = false) {
    if (scaling == Fp8Scaling::kUnsupported) return nullptr;
    sm90::GroupShape shape;
    shape.total_rows = rows;
    shape.num_groups = static_cast<int>(splits.num_groups);
    shape.host_sizes = splits.host;
    shape.n = n;
    shape.k = k;
    shape.accumulate = accumulate;
    return sm90::select_kernel(role, a, b, out, scaling == Fp8Scaling::kBlock, shape,
                               /*fast_accumulation=*/!split_accumulator);
  }
  static const KernelEntry* fp8_forward_kernel(const fp8::ForwardProblem& p) {
    return fp8_pick(Role::kForward, p.x.rowwise.dtype, p.w.rowwise.dtype, p.y.dtype,
                    fp8_scaling(p.x.rowwise_scale, p.w.rowwise_scale, 128), p.split_accumulator,
                    p.splits, p.x.rowwise.rows, p.w.rowwise.rows, p.w.rowwise.cols);
  }
  static const KernelEntry* fp8_dgrad_kernel(const fp8::DgradProblem& p) {
    return fp8_pick(Role::kDgrad, p.dy.rowwise.dtype, p.w.columnwise.dtype, p.dx.dtype,
                    fp8_scaling(p.dy.rowwise_scale, p.w.columnwise_scale, 128), p.split_accumulator,
                    p.splits, p.dy.rowwise.rows, p.w.columnwise.cols, p.w.columnwise.rows);
  }
  static const KernelEntry* fp8_wgrad_kernel(const fp8::WgradProblem& p) {
    return fp8_pick(Role::kWgrad, p.dy.columnwise.dtype, p.x.columnwise.dtype, p.dw.dtype,
                    fp8_scaling(p.dy.columnwise_scale, p.x.columnwise_scale, 1),
                    p.split_accumulator, p.splits, p.total_rows, p.dy.columnwise.rows,
                    p.x.columnwise.rows, p.accumulate);
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
