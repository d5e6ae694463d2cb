// Tuning candidates on 2-CTA clusters along M.
#pragma once

#include "core/cuda/sm90/kernel_configs.cuh"

namespace grouped_linear::cuda::sm90 {

// The two CTAs of a cluster take neighbouring row tiles of one group
// (CUTLASS's group scheduler rounds each group's row tiles up to the
// cluster) and share the B tile (the weights, in the forward and dgrad) by
// TMA multicast, so each loads half of it from L2.
template <class Base>
struct Cluster2Config : Base {
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
};

}  // namespace grouped_linear::cuda::sm90
