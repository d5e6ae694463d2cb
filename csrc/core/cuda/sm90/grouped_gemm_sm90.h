// Hopper (sm_90a) grouped GEMM kernels: one launch per role. Each launch is a
// CUTLASS 3 pointer-array grouped GEMM whose CTAs first turn the group sizes
// (on the device, or on the host as kernel arguments) into per-group problem
// shapes and pointers. No host sync and no second launch, so CUDA graphs
// capture it and the host pays for one launch.
//
// Operand roles (row-major torch tensors, CUTLASS M x N x K per group):
//   fwd    Y_g[m, N]  = X_g[m, K]  · W_g[N, K]ᵀ    M = m_g, N = N,  K = K
//   dgrad  dX_g[m, K] = dY_g[m, N] · W_g[N, K]     M = m_g, N = K,  K = N
//   wgrad  dW_g[N, K] = dY_g[m, N]ᵀ · X_g[m, K]    M = N,   N = K,  K = m_g
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace grouped_linear::cuda::sm90 {

enum class Role : uint8_t { kForward, kDgrad, kWgrad };

const char* role_name(Role role);

// Host group sizes travel inside the kernel's arguments up to this many
// groups; more groups take the fallback engine.
constexpr int kMaxHostGroups = 1024;
// Device group sizes: the in-kernel scan covers up to this many groups.
constexpr int kMaxGroups = 1024;

struct GroupedLaunch {
  Role role = Role::kForward;
  int num_groups = 0;
  int64_t total_rows = 0;  // T
  int64_t n = 0;           // out_features
  int64_t k = 0;           // in_features

  // Group sizes: a device array (int32 or int64), or host values.
  const void* device_sizes = nullptr;
  bool device_sizes_int64 = true;
  const int64_t* host_sizes = nullptr;

  // fwd: a = X, b = W, d = Y.  dgrad: a = dY, b = W, d = dX.  wgrad: a = dY, b = X, d = dW.
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  const void* bias = nullptr;  // fwd: [G, N] in the output dtype, added in the epilogue
  float beta = 0.f;            // dgrad, wgrad: 1 accumulates into D (main_grad)

  // FP8 kernels: dequantization scales (device memory), A's one value and
  // B's one or one per group; D = a_scale_inv * b_scale_inv * acc (+ ...).
  // FP8 wgrad reads the column-wise copies (core/fp8/fp8_tensor.h), rows
  // padded_columns apart.
  // Block-scaled kernels read the blockwise scale_inv arrays of
  // core/fp8/fp8_tensor.h instead (1 x 128 activation blocks, 128 x 128
  // weight blocks).
  const float* a_scale_inv = nullptr;
  const float* b_scale_inv = nullptr;
  bool b_scale_per_group = false;
  int64_t padded_columns = 0;

  int device = 0;
  int sm_count = 0;
  cudaStream_t stream = nullptr;

  // The order of each group's output tiles among the CTAs (raster_along_n).
  bool raster_along_n = false;
  // The L2 promotion of the mainloop's operand maps, in bytes (l2_promotion.h).
  int l2_promotion_bytes = 128;
};

// Where a block-scaled kernel reads group g's scales (core/fp8/fp8_tensor.h),
// in floats from the start of A's and B's scale_inv: the scale of CUTLASS
// row r (M of A, N of B; one per row, or per 128 rows of a weight) and
// 128-deep k block j is at offset + r * row_stride + j * block_stride.
// `row_begin` is the group's first row of T, `block_begin` (wgrad) its first
// column-wise scale block. constexpr, so the kernel's setup (built with
// --expt-relaxed-constexpr) and the host tests share it.
struct GroupBlockScales {
  int64_t a_offset = 0, a_row_stride = 0, a_block_stride = 0;
  int64_t b_offset = 0, b_row_stride = 0, b_block_stride = 0;
};
// The activations' scales are block-major (row-wise [ceil(C/128), T],
// column-wise [capacity, C]): a k block's scales of all rows are adjacent.
// The weights' 128 x 128 blocks are row-major over blocks.
constexpr GroupBlockScales group_block_scales(Role role, int64_t g, int64_t row_begin,
                                              int64_t block_begin, int64_t n, int64_t k,
                                              int64_t total_rows) {
  const int64_t n_blocks = (n + 127) / 128, k_blocks = (k + 127) / 128;
  GroupBlockScales s;
  if (role == Role::kWgrad) {  // dY [capacity, N], X [capacity, K]: blocks from block_begin
    s.a_offset = block_begin * n;
    s.a_row_stride = 1;
    s.a_block_stride = n;
    s.b_offset = block_begin * k;
    s.b_row_stride = 1;
    s.b_block_stride = k;
    return s;
  }
  // fwd: X [ceil(K/128), T], W [G][ceil(N/128), ceil(K/128)];
  // dgrad: dY [ceil(N/128), T], Wᵀ [G][ceil(K/128), ceil(N/128)].
  const int64_t b_rows = role == Role::kForward ? n_blocks : k_blocks;
  const int64_t depth_blocks = role == Role::kForward ? k_blocks : n_blocks;
  s.a_offset = row_begin;
  s.a_row_stride = 1;
  s.a_block_stride = total_rows;
  s.b_offset = g * b_rows * depth_blocks;
  s.b_row_stride = depth_blocks;
  s.b_block_stride = 1;
  return s;
}

// Bytes of device workspace a launch needs (argument arrays, zero scratch and
// CUTLASS's own tensor-map workspace), 256-byte aligned.
using WorkspaceSizeFn = size_t (*)(const GroupedLaunch&);
using RunFn = void (*)(const GroupedLaunch&, void* workspace);

// One compiled kernel: a role, dtypes and a tile configuration.
struct KernelEntry {
  const char* name = nullptr;  // e.g. "forward_bf16_coop_128x256"
  Role role = Role::kForward;
  DType input = DType::kBFloat16;    // A's element type
  DType input_b = DType::kBFloat16;  // B's (differs from A's only for FP8: E5M2 x E4M3)
  DType output = DType::kBFloat16;
  // FP8 with blockwise scales applied in the mainloop (Float8BlockScaling),
  // rather than one per-tensor factor applied in the epilogue.
  bool block_scaled = false;
  // FP8 without promotion of the tensor core's partial sums into fp32
  // (chosen only when the recipe allows it: use_split_accumulator=False).
  bool fast_accumulation = false;
  // Whether the epilogue can read D back (beta = 1). Kernels that cannot
  // ("_widestore") spend that shared memory on wider stores instead.
  bool reads_source = true;
  int tile_m = 0;  // CUTLASS M of a tile: rows of X/dY (fwd, dgrad) or of dW (wgrad)
  int tile_n = 0;
  WorkspaceSizeFn workspace_size = nullptr;
  RunFn run = nullptr;
};

// Every kernel built into this library (tuning builds add candidates).
const std::vector<KernelEntry>& all_kernels();

// What the engine knows about the groups when it picks a kernel: the rows of
// every group when they are on the host, else only their count and total.
struct GroupShape {
  int64_t total_rows = 0;
  int num_groups = 0;
  const int64_t* host_sizes = nullptr;  // may be null
  int64_t n = 0;
  int64_t k = 0;
  bool accumulate = false;  // dgrad/wgrad add to D: only kernels that read C
};

// The kernel for a role, input dtype and output dtype, chosen for the group
// shape; nullptr when none is built for that combination. A name set with
// set_kernel_override wins when it names a kernel of that role and dtypes.
const KernelEntry* select_kernel(Role role, DType input, DType output, const GroupShape& shape);
// FP8: A and B may differ (E5M2 gradients times E4M3 weights or activations).
const KernelEntry* select_kernel(Role role, DType input_a, DType input_b, DType output,
                                 const GroupShape& shape);
// FP8 with per-tensor (block_scaled = false) or blockwise scales.
// fast_accumulation allows a kernel that does not promote the tensor core's
// partial sums into fp32 (taken where one is built for the role and types;
// otherwise the promoting kernel runs). Without it only promoting kernels run.
const KernelEntry* select_kernel(Role role, DType input_a, DType input_b, DType output,
                                 bool block_scaled, const GroupShape& shape,
                                 bool fast_accumulation = false);

// Tuning and tests: force a kernel by name ("" restores the automatic choice).
// Throws when no built kernel has that name.
void set_kernel_override(const std::string& name);

// Which way the CTAs walk a group's output tiles (tile_order.cpp): along M
// (CUTLASS's default for grouped problems), along N, or along the shorter
// side of the tile grid (CUTLASS's rule for single GEMMs); automatic: wgrad
// along the shorter side, the forward and dgrad along M but for tall groups.
enum class TileOrder { kAlongM, kAlongN, kShorterSide };
bool shorter_side_is_n(const KernelEntry& kernel, const GroupedLaunch& launch);
// The order a launch of `kernel` takes under the current setting.
bool raster_along_n(const KernelEntry& kernel, const GroupedLaunch& launch);
// Tuning and tests: "along_m", "along_n", "shorter_side" ("" restores the
// automatic choice). Throws on any other name.
void set_tile_order(const std::string& order);

}  // namespace grouped_linear::cuda::sm90
