// Element types the core understands. The core never depends on a framework's
// dtype enum; bindings translate theirs into this one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace grouped_linear {

enum class DType : uint8_t {
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat8E4M3,  // reserved for the FP8 recipes
  kFloat8E5M2,  // reserved for the FP8 recipes
  kInt32,       // group sizes
  kInt64,       // group sizes
};

size_t element_size(DType dtype);
const char* dtype_name(DType dtype);

// The dtypes a grouped GEMM accepts for its matrix operands today.
inline bool is_gemm_operand_dtype(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = -1;  // -1 for the CPU

  bool operator==(const Device& other) const { return type == other.type && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
};

const char* device_type_name(DeviceType type);

}  // namespace grouped_linear
