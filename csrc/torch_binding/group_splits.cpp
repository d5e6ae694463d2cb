#include "torch_binding/group_splits.h"

#include "core/error.h"

namespace grouped_linear::torch_binding {

GroupSizes GroupSplits::view() const {
  GroupSizes sizes;
  sizes.num_groups = num_groups;
  if (device.defined()) {
    sizes.device = device.data_ptr();
    sizes.device_dtype = device.scalar_type() == at::kInt ? DType::kInt32 : DType::kInt64;
  } else {
    sizes.host = host.data();
  }
  return sizes;
}

GroupSplits splits_from_host(std::vector<int64_t> counts) {
  GroupSplits splits;
  splits.num_groups = static_cast<int64_t>(counts.size());
  splits.host = std::move(counts);
  return splits;
}

GroupSplits splits_from_tensor(const at::Tensor& counts, const at::Device& input_device) {
  GL_CHECK_TYPE(at::isIntegralType(counts.scalar_type(), /*includeBool=*/false), "m_splits: dtype ",
                c10::toString(counts.scalar_type()),
                " is not supported; expected an integer tensor (int32 or int64)");
  GL_CHECK_VALUE(counts.dim() == 1, "m_splits: expected a 1-D tensor, got shape ", counts.sizes());
  if (counts.is_cpu()) {
    const at::Tensor as_long = counts.to(at::kLong).contiguous();
    const int64_t* data = as_long.data_ptr<int64_t>();
    return splits_from_host(std::vector<int64_t>(data, data + as_long.numel()));
  }
  GL_CHECK_VALUE(counts.device() == input_device, "m_splits: is on ", counts.device().str(),
                 " but inp is on ", input_device.str(),
                 "; expected a list, a CPU tensor, or a tensor on the input's device");
  GroupSplits splits;
  splits.num_groups = counts.numel();
  splits.device = (counts.scalar_type() == at::kInt || counts.scalar_type() == at::kLong)
                      ? counts.contiguous()
                      : counts.to(at::kLong).contiguous();
  return splits;
}

void check_split_count(const GroupSplits& splits, int64_t expected_groups) {
  GL_CHECK_VALUE(splits.num_groups == expected_groups, "m_splits: has ", splits.num_groups,
                 " entries; expected num_gemms = ", expected_groups);
}

}  // namespace grouped_linear::torch_binding
