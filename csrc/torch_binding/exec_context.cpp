#include "torch_binding/exec_context.h"

#include "core/error.h"
#include "torch_binding/tensor_views.h"

namespace grouped_linear::torch_binding {

ExecContext exec_context(const at::Device& device) {
  if (device.is_cpu()) return ExecContext{Device{DeviceType::kCPU, -1}, nullptr, nullptr};
#ifdef GL_WITH_CUDA
  if (device.is_cuda()) return cuda_exec_context(device);
#endif
  GL_CHECK_VALUE(!device.is_cuda(), "inp is on ", device.str(),
                 " but this build of grouped_linear has no CUDA support; rebuild it against a "
                 "CUDA build of torch");
  GL_CHECK_VALUE(false, "device ", device.str(), " is not supported; expected cpu or cuda");
}

}  // namespace grouped_linear::torch_binding
