// The operand maps' L2 promotion (l2_promotion.h). A CUtensorMap is an
// opaque 128-byte encoding; rather than re-encode CUTLASS's maps (whose
// dims, strides and boxes CUTLASS derives from its layouts), the promotion
// field is located once by encoding two unlike reference maps at each of
// the four promotions, and only those bits are rewritten.
#include "core/cuda/sm90/l2_promotion.h"

#include <cuda.h>  // CUtensorMap and its enums (types only; the encoder comes from the runtime)
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace grouped_linear::cuda::sm90 {
namespace {

std::atomic<int> g_promotion_bytes{128};

using MapBytes = std::array<unsigned char, sizeof(CUtensorMap)>;

constexpr int kPromotions = 4;
constexpr CUtensorMapL2promotion kPromotionCodes[kPromotions] = {
    CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
    CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B};
constexpr int kPromotionBytes[kPromotions] = {0, 64, 128, 256};

int promotion_index(int bytes) {
  for (int i = 0; i < kPromotions; ++i)
    if (kPromotionBytes[i] == bytes) return i;
  GL_CHECK_VALUE(false, "L2 promotion: got ", bytes, " bytes, expected 0, 64, 128 or 256");
  return -1;
}

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  GL_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                 cudaEnableDefault, &found));
  GL_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
           "L2 promotion: the CUDA driver has no cuTensorMapEncodeTiled");
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

// Two unlike maps (variant 0: a 2-D byte matrix, 128-byte swizzle; 1: a
// 3-D bf16 tensor, no swizzle), so that a field found in both is the
// promotion's and not a coincidence of one map's other fields. The address
// is only encoded, never read.
MapBytes encode_reference(PFN_cuTensorMapEncodeTiled_v12000 encode, int variant,
                          CUtensorMapL2promotion promotion) {
  void* const address = reinterpret_cast<void*>(uintptr_t{1} << 20);
  CUtensorMap map{};
  const auto encode_map = [&]() -> CUresult {
    if (variant == 0) {
      const cuuint64_t dims[2] = {4096, 1024};
      const cuuint64_t strides[1] = {4096};
      const cuuint32_t box[2] = {128, 64};
      const cuuint32_t element_strides[2] = {1, 1};
      return encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, address, dims, strides, box,
                    element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                    promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    } else {
      const cuuint64_t dims[3] = {512, 300, 7};
      const cuuint64_t strides[2] = {1024, 1024 * 300};
      const cuuint32_t box[3] = {32, 16, 1};
      const cuuint32_t element_strides[3] = {1, 1, 1};
      return encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, address, dims, strides, box,
                    element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                    promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    }
  };
  // The encoder needs a current context, which a program that has made no
  // CUDA call yet lacks (CUresult 201): a runtime call then makes the
  // device's primary context current. Only on that error, so that a first
  // call inside a CUDA graph's capture (which has a context) makes no call
  // the capture forbids.
  CUresult status = encode_map();
  if (status == CUDA_ERROR_INVALID_CONTEXT) {
    GL_CUDA_CHECK(cudaFree(nullptr));
    status = encode_map();
  }
  GL_CHECK(status == CUDA_SUCCESS,
           "L2 promotion: encoding a reference tensor map failed (CUresult ",
           static_cast<int>(status), ")");
  MapBytes bytes{};
  std::memcpy(bytes.data(), &map, bytes.size());
  return bytes;
}

struct PromotionField {
  MapBytes mask{};                            // the field's bits
  std::array<MapBytes, kPromotions> value{};  // each promotion's bits, masked
};

PromotionField calibrate() {
  const auto encode = tensor_map_encoder();
  std::array<std::array<MapBytes, kPromotions>, 2> maps;
  for (int v = 0; v < 2; ++v)
    for (int p = 0; p < kPromotions; ++p)
      maps[v][p] = encode_reference(encode, v, kPromotionCodes[p]);
  // The field: the bits that change with the promotion alone. Both maps
  // must show the same bits holding the same value for each promotion.
  std::array<MapBytes, 2> masks{};
  for (int v = 0; v < 2; ++v)
    for (int p = 1; p < kPromotions; ++p)
      for (size_t i = 0; i < masks[v].size(); ++i)
        masks[v][i] |= static_cast<unsigned char>(maps[v][p][i] ^ maps[v][0][i]);
  PromotionField field;
  field.mask = masks[0];
  bool found = false;
  for (unsigned char b : field.mask) found = found || b != 0;
  GL_CHECK(found && masks[0] == masks[1],
           "L2 promotion: the driver's tensor-map encoding keeps the promotion in no fixed bits; "
           "leave the L2 promotion at its default");
  for (int p = 0; p < kPromotions; ++p) {
    for (size_t i = 0; i < field.mask.size(); ++i) {
      field.value[p][i] = static_cast<unsigned char>(maps[0][p][i] & field.mask[i]);
      GL_CHECK(field.value[p][i] == (maps[1][p][i] & field.mask[i]),
               "L2 promotion: the two reference maps encode promotion ", kPromotionBytes[p],
               " differently; leave the L2 promotion at its default");
    }
  }
  return field;
}

const PromotionField& promotion_field() {
  static const PromotionField field = calibrate();  // a throw leaves it for the next call
  return field;
}

}  // namespace

int l2_promotion_bytes() { return g_promotion_bytes.load(std::memory_order_relaxed); }

void set_l2_promotion(const std::string& promotion) {
  GL_CHECK_VALUE(promotion.empty() || promotion == "128B" || promotion == "256B",
                 "L2 promotion: got '", promotion,
                 "', expected '' (the default: CUTLASS's 128B), '128B' or '256B'");
  g_promotion_bytes.store(promotion == "256B" ? 256 : 128, std::memory_order_relaxed);
}

void set_tensor_map_l2_promotion(void* tensor_map, int bytes) {
  const int target = promotion_index(bytes);
  const PromotionField& field = promotion_field();
  auto* map = static_cast<unsigned char*>(tensor_map);
  bool known = false;
  for (int p = 0; p < kPromotions && !known; ++p) {
    bool same = true;
    for (size_t i = 0; i < field.mask.size(); ++i)
      same = same && (map[i] & field.mask[i]) == field.value[p][i];
    known = same;
  }
  GL_CHECK(known, "L2 promotion: the tensor map holds no promotion this driver encodes");
  for (size_t i = 0; i < field.mask.size(); ++i)
    map[i] = static_cast<unsigned char>((map[i] & ~field.mask[i]) | field.value[target][i]);
}

}  // namespace grouped_linear::cuda::sm90
