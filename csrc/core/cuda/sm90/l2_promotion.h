// How much L2 fetches from DRAM for each miss of the grouped kernels'
// operand loads: the L2 promotion of the mainloop's A and B tensor maps.
//
// CUTLASS encodes every tensor map with 128-byte promotion. A k-block of an
// FP8 operand is 128 bytes of each row, so each load of a 256-row weight box
// is 256 separate 128-byte reads, K bytes apart; with 256-byte promotion L2
// fetches each row's next k-block in the same DRAM access, which the same
// CTA asks for next (DeepGEMM encodes its maps so). Which is faster is a
// question for the benchmark (`python -m bench.l2_promotion_ab`); the
// default stays CUTLASS's.
#pragma once

#include <string>

namespace grouped_linear::cuda::sm90 {

// The promotion a launch's operand maps get, in bytes: 128 (CUTLASS's
// encoding, untouched) unless set_l2_promotion chose another.
int l2_promotion_bytes();

// Tuning and tests: "128B", "256B" ("" restores the default, 128B). Throws
// on any other name.
void set_l2_promotion(const std::string& promotion);

// Rewrites the L2 promotion field of an encoded tensor map (a CUtensorMap,
// 128 bytes) to `bytes` (0 for none, 64, 128 or 256), leaving every other
// field as encoded. The field's bits are found once per process by encoding
// reference maps with the driver's cuTensorMapEncodeTiled at each promotion.
// Throws when that calibration is inconsistent, or when `tensor_map` holds
// none of the promotions' encodings (a map this function does not know).
void set_tensor_map_l2_promotion(void* tensor_map, int bytes);

}  // namespace grouped_linear::cuda::sm90
