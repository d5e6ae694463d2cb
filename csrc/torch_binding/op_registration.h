// The layer's dispatcher ops (grouped_linear::forward, ::backward,
// ::fp8_forward, ::fp8_backward, ::fp8_linear) for torch.compile; see
// op_registration.cpp. They register themselves when _C is loaded.
#pragma once

#include <torch/extension.h>

#include <cstdint>
#include <memory>

namespace grouped_linear::torch_binding {

class Fp8ModuleState;

// A process-wide handle naming `state` in fp8_forward's `state_handle`
// (the same handle for the same state; the state is not kept alive).
int64_t fp8_state_handle(const std::shared_ptr<Fp8ModuleState>& state);

// _C._compile_prepare_fp8 (used while dynamo traces).
void register_compile_support(pybind11::module_& m);

}  // namespace grouped_linear::torch_binding
