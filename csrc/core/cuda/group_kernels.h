// Small per-group kernels the cuBLAS engine needs around its GEMMs: filling
// each group's output rows with its bias (the GEMM then adds with beta = 1),
// and the bias gradient (column sums of each group's rows of dY). One launch
// covers up to kGroupsPerLaunch groups; row offsets travel as kernel arguments,
// so host group sizes need no copy to the device.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/views.h"

namespace grouped_linear::cuda {

constexpr int kGroupsPerLaunch = 256;

// Calls launch(first_group, count, &row_offsets[first_group]) for each chunk of
// at most kGroupsPerLaunch groups; `row_offsets` has G + 1 entries.
template <typename Launch>
void for_each_group_chunk(const std::vector<int64_t>& row_offsets, Launch&& launch) {
  const int64_t groups = static_cast<int64_t>(row_offsets.size()) - 1;
  for (int64_t g0 = 0; g0 < groups; g0 += kGroupsPerLaunch)
    launch(g0, static_cast<int>(std::min<int64_t>(kGroupsPerLaunch, groups - g0)),
           &row_offsets[g0]);
}

// Y[row, :] = bias[g, :] for every row of every group in [group0, group0 + count).
// `row_offsets` has count + 1 entries: the first row of each group and the end.
void launch_fill_bias_rows(const MatrixView& y, const GroupedMatrixView& bias, int64_t group0,
                           int count, const int64_t* row_offsets, cudaStream_t stream);

// dbias[g, :] = Σ_rows dY_g for every group in [group0, group0 + count).
void launch_bias_grad(const MatrixView& dy, const GroupedMatrixView& dbias, int64_t group0,
                      int count, const int64_t* row_offsets, cudaStream_t stream);

}  // namespace grouped_linear::cuda

namespace grouped_linear::cuda {

// The same two kernels with group sizes in device memory (int32 or int64):
// each block finds its group's rows itself, so nothing is read back. Sizes are
// clamped as the grouped GEMM's setup kernel clamps them (negative -> 0, rows
// past `total_rows` dropped).
void launch_fill_bias_rows_device_sizes(const MatrixView& y, const GroupedMatrixView& bias,
                                        const void* sizes, bool sizes_int64, int num_groups,
                                        cudaStream_t stream);
void launch_bias_grad_device_sizes(const MatrixView& dy, const GroupedMatrixView& dbias,
                                   const void* sizes, bool sizes_int64, int num_groups,
                                   cudaStream_t stream);

}  // namespace grouped_linear::cuda
