// The order in which a cooperative tile's two consumer warpgroups issue
// their MMAs. In the cooperative mainloops both warpgroups wait for the same
// stage, issue their MMAs together and then promote their sums together, so
// the tensor cores idle while both promote. With turns, each warpgroup
// issues only after the other has issued its previous MMAs: the MMAs queue
// one warpgroup's behind the other's, and one warpgroup promotes while the
// other's MMAs run. The MMAs and sums are the same, in the same order.
#pragma once

#include <cutlass/arch/barrier.h>

namespace grouped_linear::cuda::sm90 {

// Both warpgroups issue as soon as their stage is loaded.
struct TogetherAtTensorCores {
  CUTLASS_DEVICE explicit TogetherAtTensorCores(int) {}
  CUTLASS_DEVICE void before_issue() {}
  CUTLASS_DEVICE void after_issue() {}
  CUTLASS_DEVICE void finish() {}
};

// Issues in the order 0, 1, 0, 1, ... through two named barriers (user ids
// 0 and 1). Warpgroup w arrives at barrier w after issuing, and the other
// syncs on it before its next issue. Warpgroup 0's first issue waits for no
// one, and its sync in finish() takes warpgroup 1's last arrival, so each
// tile's arrivals are all matched. The barrier ids are computed at run
// time, so ptxas reserves all 16; these kernels run one CTA an SM anyway.
class TurnsAtTensorCores {
 public:
  CUTLASS_DEVICE explicit TurnsAtTensorCores(int thread_idx)
      : warp_group_(__shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarpGroup, 0)) {}

  CUTLASS_DEVICE void before_issue() {
    if (warp_group_ == 1 || issued_) cutlass::arch::NamedBarrier::sync(kThreads, 1 - warp_group_);
    issued_ = true;
  }
  CUTLASS_DEVICE void after_issue() { cutlass::arch::NamedBarrier::arrive(kThreads, warp_group_); }
  CUTLASS_DEVICE void finish() {
    if (warp_group_ == 0 && issued_) cutlass::arch::NamedBarrier::sync(kThreads, 1);
  }

 private:
  static constexpr uint32_t kThreads = 2 * cutlass::NumThreadsPerWarpGroup;
  int warp_group_;
  bool issued_ = false;
};

}  // namespace grouped_linear::cuda::sm90
