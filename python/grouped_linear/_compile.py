"""The modules' forward while torch.compile traces them: the registered
dispatcher ops (csrc/torch_binding/op_registration.cpp) instead of the
pybind call, which dynamo cannot trace. Eager forwards never come here.

m_splits becomes a tensor on the input's device (a list: one small copy; a
device m_splits is passed as it is and never read on the host). Under FP8 the
recipe is read from `fp8._compile_stack` at trace time (dynamo guards on
it), and delayed scaling's amax histories and scales, read from the module's
`_C.fp8.ModuleState` properties, are graph inputs the ops mutate in place.
"""

import ctypes
from typing import Optional

import torch

from . import _C, fp8


def _prepare_fp8(state_id: int, codes, device: str) -> int:
    # Runs once, while dynamo traces (see below): readies the state's buffers
    # for this recipe and device and returns its handle for fp8_forward. The
    # state comes as its id() because a function whose result dynamo takes as
    # a constant must take constants (torch 2.11 refuses the object itself);
    # the object is alive while this runs, since the traced module holds it.
    state = ctypes.cast(state_id, ctypes.py_object).value
    return _C._compile_prepare_fp8(state, list(codes), device)


# What torch.compiler.assume_constant_result sets; set directly so that
# importing grouped_linear does not import torch._dynamo.
_prepare_fp8._dynamo_marked_constant = True


def _check_supported(module, is_first_microbatch) -> None:
    if is_first_microbatch is not None:
        raise NotImplementedError("grouped_linear: is_first_microbatch: the FP8 weight cache is "
                                  "not supported under torch.compile; pass None")
    if module.fuse_wgrad_accumulation:
        raise NotImplementedError("grouped_linear: fuse_wgrad_accumulation is not supported "
                                  "under torch.compile")
    if module.delay_wgrad_compute:
        # The stash is a side effect of backward that AOTAutograd's traced
        # backward graph could not express; compile the module without it.
        raise NotImplementedError("grouped_linear: delay_wgrad_compute=True is not supported "
                                  "under torch.compile; construct the module with "
                                  "delay_wgrad_compute=False or run it eagerly")


def forward(module, inp: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
            m_splits, is_first_microbatch):
    _check_supported(module, is_first_microbatch)
    # The ops take m_splits on the input's device: fake tensors (what the
    # compiler traces with) cannot mix a CPU tensor into a CUDA op. Host sizes
    # cost one small copy; a device m_splits is passed as it is.
    if m_splits is not None and not isinstance(m_splits, torch.Tensor):
        m_splits = torch.tensor(list(m_splits), dtype=torch.int64, device=inp.device)
    elif m_splits is not None and m_splits.device != inp.device:
        m_splits = m_splits.to(inp.device)
    codes = fp8._compile_stack[-1] if fp8._compile_stack else None
    if codes is None:
        return torch.ops.grouped_linear.forward(inp, weight, bias, m_splits)
    state = module._fp8_state
    handle = -1
    hist = scale = bwd_hist = bwd_scale = None
    if codes[0] == 0:  # delayed scaling
        handle = _prepare_fp8(id(state), codes, str(weight.device))
        hist, scale = state.amax_history_fwd, state.scale_fwd
        bwd_hist, bwd_scale = state.amax_history_bwd, state.scale_bwd
    return torch.ops.grouped_linear.fp8_linear(inp, weight, bias, m_splits, list(codes), hist,
                                               scale, bwd_hist, bwd_scale, handle,
                                               module.save_original_input)
