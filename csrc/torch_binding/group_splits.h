// m_splits as the binding holds it: counts on the host, or a 1-D integer
// tensor on the input's device (read on the device, never synced by us).
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "core/views.h"

namespace grouped_linear::torch_binding {

struct GroupSplits {
  int64_t num_groups = 0;
  std::vector<int64_t> host;  // used when `device` is undefined
  at::Tensor device;          // 1-D int32/int64 on the input's CUDA device, or undefined

  GroupSizes view() const;
};

GroupSplits splits_from_host(std::vector<int64_t> counts);
// A CPU tensor becomes host counts; a CUDA tensor must sit on `input_device`.
GroupSplits splits_from_tensor(const at::Tensor& counts, const at::Device& input_device);
// `expected_groups` is the module's num_gemms.
void check_split_count(const GroupSplits& splits, int64_t expected_groups);

}  // namespace grouped_linear::torch_binding
