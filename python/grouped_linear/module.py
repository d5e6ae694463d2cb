"""The user-facing modules. Thin by design: module state and parameters here,
every per-call decision in C++ (grouped_linear._C)."""

from typing import Callable, Optional, Sequence, Union

import torch
from torch.nn import Parameter

from . import _C, _compile
from .checkpoint import fill_missing_extra_state, load_per_expert, save_per_expert

# Transformer Engine's default weight init (normal, std 0.023); bias zeros.
_DEFAULT_INIT_STD = 0.023

_SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Bound once: the eager forward pays one call, no attribute lookups. True only
# while torch.compile traces, when the forward goes through the dispatcher ops.
_is_compiling = torch.compiler.is_compiling


def _resolve_device(device) -> torch.device:
    # TE defaults to "cuda"; None here means CUDA when present, else the CPU,
    # so the same code runs on machines without a GPU.
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _check_positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"grouped_linear: {name}: expected an int, got {value!r} "
                        f"({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"grouped_linear: {name}: is {value}; expected an int >= {minimum}")
    return value


def _resolve_dtype(params_dtype) -> torch.dtype:
    dtype = torch.get_default_dtype() if params_dtype is None else params_dtype
    if dtype not in _SUPPORTED_DTYPES:
        raise TypeError(f"grouped_linear: params_dtype: {dtype} is not supported; expected "
                        "torch.float32, torch.float16 or torch.bfloat16")
    return dtype


class GroupedLinear(torch.nn.Module):
    """G linear layers applied to consecutive row groups of one input.

    forward(inp [..., in_features], m_splits) -> [..., out_features], where the
    flattened rows of `inp` are split into `num_gemms` groups of m_splits[i]
    rows and group i is multiplied by weight i. `m_splits` is a list/tuple of
    ints or a 1-D integer tensor (CPU or the input's device).

    Arguments follow Transformer Engine's `te.pytorch.GroupedLinear` where they
    overlap. Parameters: `weight` [G, out, in] and `bias` [G, out]; state_dict
    keys are per expert (`weight0`.., `bias0`..) plus `_extra_state` (the FP8
    state: delayed-scaling amax histories and scales).

    Inside `grouped_linear.autocast(recipe=...)` the three products run in
    FP8 (the choice is made in C++ per call). `is_first_microbatch`: None
    quantizes the weights on every call; True quantizes and caches them;
    False reuses the cache (gradient accumulation over micro-batches).
    `save_original_input=True` keeps the high-precision input for backward
    instead of its 1-byte quantized copy.
    """

    def __init__(self, num_gemms: int, in_features: int, out_features: int, bias: bool = True,
                 *, params_dtype: Optional[torch.dtype] = None,
                 device: Optional[Union[torch.device, str]] = None,
                 fuse_wgrad_accumulation: bool = False, return_bias: bool = False,
                 init_method: Optional[Callable[[torch.Tensor], None]] = None,
                 save_original_input: bool = False):
        super().__init__()
        self.num_gemms = _check_positive_int("num_gemms", num_gemms)
        self.in_features = _check_positive_int("in_features", in_features)
        self.out_features = _check_positive_int("out_features", out_features)
        self.use_bias = bool(bias)
        self.fuse_wgrad_accumulation = bool(fuse_wgrad_accumulation)
        self.return_bias = bool(return_bias)
        self.init_method = init_method
        dtype = _resolve_dtype(params_dtype)
        device = _resolve_device(device)

        self.weight = Parameter(torch.empty(num_gemms, out_features, in_features, dtype=dtype,
                                            device=device))
        if self.use_bias:
            self.bias = Parameter(torch.empty(num_gemms, out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.save_original_input = bool(save_original_input)
        self._config = _C.LinearConfig(fuse_wgrad_accumulation=self.fuse_wgrad_accumulation,
                                       save_original_input=self.save_original_input)
        self._fp8_state = _C.fp8.ModuleState(num_gemms, "GroupedLinear")
        self.register_state_dict_post_hook(save_per_expert)
        self.register_load_state_dict_pre_hook(load_per_expert)
        self.register_load_state_dict_pre_hook(fill_missing_extra_state)
        if device.type != "meta":
            self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            if self.init_method is None:
                torch.nn.init.normal_(self.weight, mean=0.0, std=_DEFAULT_INIT_STD)
            else:
                for expert in self.weight.unbind(0):  # init only, not a hot path
                    self.init_method(expert)
            if self.bias is not None:
                self.bias.zero_()

    def forward(self, inp: torch.Tensor, m_splits: Union[Sequence[int], torch.Tensor],
                is_first_microbatch: Optional[bool] = None):
        main_grad = getattr(self.weight, "main_grad", None) if self.fuse_wgrad_accumulation else None
        fused_bias = None if self.return_bias else self.bias
        if _is_compiling():  # dynamo cannot trace the pybind call
            out = _compile.forward(self, inp, self.weight, fused_bias, m_splits,
                                   is_first_microbatch)
        else:
            out = _C.grouped_linear(inp, self.weight, fused_bias, m_splits, main_grad,
                                    self._config, self._fp8_state, is_first_microbatch)
        if self.return_bias:
            return out, (list(self.bias.unbind(0)) if self.bias is not None else None)
        return out

    # FP8 state in checkpoints, under Transformer Engine's key `_extra_state`.
    def get_extra_state(self):
        return self._fp8_state.state_dict()

    def set_extra_state(self, state) -> None:
        self._fp8_state.load_state_dict(state)

    def extra_repr(self) -> str:
        return (f"num_gemms={self.num_gemms}, in_features={self.in_features}, "
                f"out_features={self.out_features}, bias={self.use_bias}, "
                f"fuse_wgrad_accumulation={self.fuse_wgrad_accumulation}")


class Linear(torch.nn.Module):
    """y = x Wᵀ + b, the one-group case of GroupedLinear, on the same engines.

    Parameters `weight` [out, in] and `bias` [out], as torch.nn.Linear and TE's
    Linear name them.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 params_dtype: Optional[torch.dtype] = None,
                 device: Optional[Union[torch.device, str]] = None,
                 fuse_wgrad_accumulation: bool = False, return_bias: bool = False,
                 init_method: Optional[Callable[[torch.Tensor], None]] = None,
                 save_original_input: bool = False):
        super().__init__()
        self.in_features = _check_positive_int("in_features", in_features)
        self.out_features = _check_positive_int("out_features", out_features)
        self.use_bias = bool(bias)
        self.fuse_wgrad_accumulation = bool(fuse_wgrad_accumulation)
        self.return_bias = bool(return_bias)
        self.init_method = init_method
        dtype = _resolve_dtype(params_dtype)
        device = _resolve_device(device)
        self.weight = Parameter(torch.empty(out_features, in_features, dtype=dtype, device=device))
        if self.use_bias:
            self.bias = Parameter(torch.empty(out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.save_original_input = bool(save_original_input)
        self._config = _C.LinearConfig(fuse_wgrad_accumulation=self.fuse_wgrad_accumulation,
                                       save_original_input=self.save_original_input)
        self._fp8_state = _C.fp8.ModuleState(1, "Linear")
        self.register_load_state_dict_pre_hook(fill_missing_extra_state)
        if device.type != "meta":
            self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            if self.init_method is None:
                torch.nn.init.normal_(self.weight, mean=0.0, std=_DEFAULT_INIT_STD)
            else:
                self.init_method(self.weight)
            if self.bias is not None:
                self.bias.zero_()

    def forward(self, inp: torch.Tensor, is_first_microbatch: Optional[bool] = None):
        main_grad = getattr(self.weight, "main_grad", None) if self.fuse_wgrad_accumulation else None
        fused_bias = None if self.return_bias else self.bias
        if _is_compiling():
            out = _compile.forward(self, inp, self.weight, fused_bias, None, is_first_microbatch)
        else:
            out = _C.linear(inp, self.weight, fused_bias, main_grad, self._config,
                            self._fp8_state, is_first_microbatch)
        if self.return_bias:
            return out, self.bias
        return out

    def get_extra_state(self):
        return self._fp8_state.state_dict()

    def set_extra_state(self, state) -> None:
        self._fp8_state.load_state_dict(state)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.use_bias}")
