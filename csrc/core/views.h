// Non-owning descriptions of the operands of a grouped linear layer. Memory
// belongs to the caller; the core only reads and writes through these.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace grouped_linear {

// A row-major matrix [rows, cols] whose rows are `row_stride` elements apart.
// Grouped activations (X, Y, dY, dX) are one such matrix split by rows.
struct MatrixView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;

  bool defined() const { return data != nullptr || rows * cols == 0; }
};

// G row-major matrices [rows, cols], `group_stride` elements apart: the
// [G, N, K] weight, its gradient, and (with cols = N, rows = 1) the [G, N] bias.
struct GroupedMatrixView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device;
  int64_t groups = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
  int64_t group_stride = 0;

  bool present = false;  // an optional operand (bias, bias gradient) may be absent
};

// How the T rows of the activations split into groups. Counts may live on the
// host, on the device, or both; an engine says which it needs.
struct GroupSizes {
  int64_t num_groups = 0;
  const int64_t* host = nullptr;       // num_groups counts in host memory, or null
  const void* device = nullptr;        // num_groups counts in device memory, or null
  DType device_dtype = DType::kInt64;  // kInt32 or kInt64
};

}  // namespace grouped_linear
