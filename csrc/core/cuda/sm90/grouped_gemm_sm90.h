// Hopper (sm_90a) grouped GEMM kernels: one launch of a CUTLASS 3 pointer-array
// kernel per role, after one tiny setup kernel that turns the group sizes
// (on the device, or on the host as kernel arguments) into per-group
// problem shapes and pointers. No host sync, so CUDA graphs capture it.
//
// Operand roles (row-major torch tensors, CUTLASS M x N x K per group):
//   fwd    Y_g[m, N]  = X_g[m, K]  · W_g[N, K]ᵀ    M = m_g, N = N,  K = K
//   dgrad  dX_g[m, K] = dY_g[m, N] · W_g[N, K]     M = m_g, N = K,  K = N
//   wgrad  dW_g[N, K] = dY_g[m, N]ᵀ · X_g[m, K]    M = N,   N = K,  K = m_g
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace grouped_linear::cuda::sm90 {

enum class Role : uint8_t { kForward, kDgrad, kWgrad };

// Host group sizes travel inside the setup kernel's arguments up to this many
// groups; more groups take the fallback engine.
constexpr int kMaxHostGroups = 1024;
// The setup kernel is one block; device group sizes up to this many groups.
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
  float beta = 0.f;  // 1: D += (bias pre-filled into Y, or main_grad accumulation)

  int sm_count = 0;
  cudaStream_t stream = nullptr;
};

// Bytes of device workspace a launch needs (argument arrays, zero scratch and
// CUTLASS's own tensor-map workspace), 256-byte aligned.
using WorkspaceSizeFn = size_t (*)(const GroupedLaunch&);
using RunFn = void (*)(const GroupedLaunch&, void* workspace);

struct KernelEntry {
  WorkspaceSizeFn workspace_size = nullptr;
  RunFn run = nullptr;
};

// The kernel for a role, input dtype and output dtype; {nullptr, nullptr} when
// none is built for that combination.
KernelEntry find_kernel(Role role, DType input, DType output);

}  // namespace grouped_linear::cuda::sm90
