#include "torch_binding/tensor_views.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "core/error.h"

namespace grouped_linear::torch_binding {

DType to_core_dtype(at::ScalarType type, const char* arg_name) {
  switch (type) {
    case at::kFloat: return DType::kFloat32;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kFloat8_e4m3fn: return DType::kFloat8E4M3;
    case at::kFloat8_e5m2: return DType::kFloat8E5M2;
    case at::kInt: return DType::kInt32;
    case at::kLong: return DType::kInt64;
    default:
      GL_CHECK_TYPE(false, arg_name, ": dtype ", c10::toString(type),
                    " is not supported; expected float32, float16 or bfloat16");
  }
}

Device to_core_device(const at::Device& device) {
  if (device.is_cpu()) return Device{DeviceType::kCPU, -1};
  GL_CHECK_VALUE(device.is_cuda(), "device ", device.str(),
                 " is not supported; expected cpu or cuda");
  // "cuda" without an index means the current device, as in torch.
  const c10::DeviceIndex index =
      device.has_index()
          ? device.index()
          : c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice().index();
  return Device{DeviceType::kCUDA, index};
}

MatrixView matrix_view(const at::Tensor& t, const char* arg_name) {
  GL_CHECK(t.dim() == 2, arg_name, ": expected a 2-D tensor, got ", t.dim(), "-D");
  GL_CHECK(t.numel() == 0 || t.size(1) <= 1 || t.stride(1) == 1, arg_name,
           ": columns must be contiguous");
  MatrixView view;
  view.data = t.data_ptr();
  view.dtype = to_core_dtype(t.scalar_type(), arg_name);
  view.device = to_core_device(t.device());
  view.rows = t.size(0);
  view.cols = t.size(1);
  view.row_stride = t.size(0) <= 1 || t.numel() == 0 ? t.size(1) : t.stride(0);
  return view;
}

GroupedMatrixView grouped_view(const at::Tensor& t, const char* arg_name) {
  GL_CHECK(t.dim() == 3, arg_name, ": expected a 3-D tensor, got ", t.dim(), "-D");
  GL_CHECK(t.size(2) <= 1 || t.stride(2) == 1, arg_name, ": columns must be contiguous");
  GroupedMatrixView view;
  view.data = t.data_ptr();
  view.dtype = to_core_dtype(t.scalar_type(), arg_name);
  view.device = to_core_device(t.device());
  view.groups = t.size(0);
  view.rows = t.size(1);
  view.cols = t.size(2);
  view.row_stride = t.size(1) <= 1 ? t.size(2) : t.stride(1);
  view.group_stride = t.size(0) <= 1 ? view.rows * view.row_stride : t.stride(0);
  view.present = true;
  return view;
}

GroupedMatrixView bias_view(const at::Tensor& t, const char* arg_name) {
  if (!t.defined()) return GroupedMatrixView{};
  GL_CHECK(t.dim() == 2, arg_name, ": expected a 2-D [groups, out_features] tensor, got ", t.dim(),
           "-D");
  return grouped_view(t.unsqueeze(1), arg_name);
}

}  // namespace grouped_linear::torch_binding
