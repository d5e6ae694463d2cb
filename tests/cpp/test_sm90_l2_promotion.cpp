// The operand maps' L2 promotion (sm90/l2_promotion.h): the setting's
// names, which need nothing, and the rewrite of an encoded tensor map,
// which needs the CUDA driver's encoder (skipped where there is none): a
// map encoded at 128 bytes and rewritten to each promotion must equal the
// driver's own encoding at that promotion, byte for byte, for maps unlike
// the ones the field was located with.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/sm90/l2_promotion.h"
#include "core/error.h"

namespace grouped_linear::cuda::sm90 {
namespace {

struct PromotionGuard {
  ~PromotionGuard() { set_l2_promotion(""); }
};

template <class Call>
void expect_value_error(Call call, const std::string& text) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one containing '" << text << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(Sm90L2Promotion, SettingTakesTheTwoNamesAndKeepsItsValueOnABadOne) {
  PromotionGuard guard;
  EXPECT_EQ(l2_promotion_bytes(), 128);
  set_l2_promotion("256B");
  EXPECT_EQ(l2_promotion_bytes(), 256);
  expect_value_error([] { set_l2_promotion("512B"); }, "L2 promotion: got '512B', expected ''");
  EXPECT_EQ(l2_promotion_bytes(), 256);
  set_l2_promotion("128B");
  EXPECT_EQ(l2_promotion_bytes(), 128);
  set_l2_promotion("256B");
  set_l2_promotion("");
  EXPECT_EQ(l2_promotion_bytes(), 128);
}

PFN_cuTensorMapEncodeTiled_v12000 encoder(std::string* why) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    *why = "no CUDA device (the tensor-map encoder is the driver's)";
    return nullptr;
  }
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == nullptr) {
    *why = "the driver has no cuTensorMapEncodeTiled";
    return nullptr;
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

// Maps like the grouped kernels' operands: FP8 codes (bytes) and bf16 rows
// in 3-D [rows, K, 1] form with 128-byte and 64-byte swizzles, boxes of 64
// to 256 rows, and a 2-D fp32 one without swizzle.
struct MapCase {
  CUtensorMapDataType type;
  int rank;
  cuuint64_t dims[3];
  cuuint64_t strides[2];
  cuuint32_t box[3];
  CUtensorMapSwizzle swizzle;
};

const MapCase kCases[] = {
    {CU_TENSOR_MAP_DATA_TYPE_UINT8,
     3,
     {7168, 4096, 1},
     {7168, 7168ull * 4096},
     {128, 256, 1},
     CU_TENSOR_MAP_SWIZZLE_128B},
    {CU_TENSOR_MAP_DATA_TYPE_UINT8,
     3,
     {2048, 1536, 1},
     {2048, 2048ull * 1536},
     {128, 128, 1},
     CU_TENSOR_MAP_SWIZZLE_128B},
    {CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
     3,
     {4096, 300, 1},
     {8192, 8192ull * 300},
     {64, 64, 1},
     CU_TENSOR_MAP_SWIZZLE_128B},
    {CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
     3,
     {768, 2048, 1},
     {1536, 1536ull * 2048},
     {32, 128, 1},
     CU_TENSOR_MAP_SWIZZLE_64B},
    {CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
     2,
     {1000, 77, 0},
     {4000, 0},
     {16, 8, 0},
     CU_TENSOR_MAP_SWIZZLE_NONE},
};

std::vector<unsigned char> encode(PFN_cuTensorMapEncodeTiled_v12000 enc, const MapCase& c,
                                  CUtensorMapL2promotion promotion) {
  CUtensorMap map{};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  void* address = reinterpret_cast<void*>(uintptr_t{3} << 30);
  const CUresult status =
      enc(&map, c.type, c.rank, address, c.dims, c.strides, c.box, element_strides,
          CU_TENSOR_MAP_INTERLEAVE_NONE, c.swizzle, promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  EXPECT_EQ(status, CUDA_SUCCESS);
  std::vector<unsigned char> bytes(sizeof(map));
  std::memcpy(bytes.data(), &map, sizeof(map));
  return bytes;
}

TEST(Sm90L2Promotion, RewrittenMapsEqualTheDriversEncodingAtEachPromotion) {
  std::string why;
  const auto enc = encoder(&why);
  if (enc == nullptr) GTEST_SKIP() << why;
  // The calibration first: the driver's encoder needs a current context,
  // which the calibration makes where there is none yet (run alone, as
  // --gtest_filter='Sm90L2Promotion.*' does, this process has made no CUDA
  // call that creates one). A map of zeros may hold promotion "none"'s
  // encoding or no promotion's; either way the calibration itself must pass.
  {
    std::vector<unsigned char> zeros(sizeof(CUtensorMap), 0);
    try {
      set_tensor_map_l2_promotion(zeros.data(), 128);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("holds no promotion this driver encodes"),
                std::string::npos)
          << e.what();
    }
  }
  const CUtensorMapL2promotion codes[] = {
      CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B};
  const int bytes[] = {0, 64, 128, 256};
  for (size_t c = 0; c < sizeof(kCases) / sizeof(kCases[0]); ++c) {
    const auto cutlass_like = encode(enc, kCases[c], CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
    for (int p = 0; p < 4; ++p) {
      auto rewritten = cutlass_like;
      set_tensor_map_l2_promotion(rewritten.data(), bytes[p]);
      EXPECT_EQ(rewritten, encode(enc, kCases[c], codes[p]))
          << "case " << c << ", promotion " << bytes[p];
      // And back: the rewrite reads whichever promotion a map holds.
      set_tensor_map_l2_promotion(rewritten.data(), 128);
      EXPECT_EQ(rewritten, cutlass_like) << "case " << c << ", from " << bytes[p] << " back";
    }
  }
  std::vector<unsigned char> map = encode(enc, kCases[0], CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
  expect_value_error([&] { set_tensor_map_l2_promotion(map.data(), 512); },
                     "got 512 bytes, expected 0, 64, 128 or 256");
}

}  // namespace
}  // namespace grouped_linear::cuda::sm90
