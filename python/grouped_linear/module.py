"""The user-facing modules. Thin by design: module state and parameters here,
every per-call decision in C++ (grouped_linear._C)."""

import contextlib
from typing import Callable, Optional, Sequence, Union

import torch
from torch.nn import Parameter

from . import _C, _compile, fp8
from .checkpoint import fill_missing_extra_state, load_per_expert, save_per_expert

# Transformer Engine's default weight init (normal, std 0.023); bias zeros.
_DEFAULT_INIT_STD = 0.023

_SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Bound once: the eager forward pays one call, no attribute lookups. True only
# while torch.compile traces, when the forward goes through the dispatcher ops.
_is_compiling = torch.compiler.is_compiling
# Whether any torch.autocast (AMP) region is on: one cheap call where none is.
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", None)


def _amp_dtype(inp: torch.Tensor) -> Optional[torch.dtype]:
    """The dtype torch.autocast runs matmuls in on inp's device, or None
    outside an AMP region: the module then computes in that dtype, as
    torch.nn.Linear and Transformer Engine's modules do, the parameters cast
    for the call (their gradients flow back in the parameters' dtype)."""
    if _any_autocast is not None and not _any_autocast():
        return None
    device_type = inp.device.type
    if not torch.is_autocast_enabled(device_type):
        return None
    dtype = torch.get_autocast_dtype(device_type)
    return dtype if dtype in _SUPPORTED_DTYPES else None


def _cast(t: Optional[torch.Tensor], dtype: Optional[torch.dtype]):
    return t if t is None or dtype is None or t.dtype == dtype else t.to(dtype)


def _fp8_on() -> bool:
    # While dynamo traces, the recipe comes from fp8._compile_stack (guarded
    # on), as in _compile.forward; eagerly from the C++ autocast state.
    if _is_compiling():
        return bool(fp8._compile_stack) and fp8._compile_stack[-1] is not None
    return _C.fp8.autocast_enabled()


def _cast_weight(weight: torch.Tensor, dtype: Optional[torch.dtype]) -> torch.Tensor:
    """The weight for an AMP call: under FP8 autocast as it is, since the FP8
    path quantizes it from its own dtype (no cast copy of G*N*K values each
    call, one rounding instead of two), else cast. Compiled and eager calls
    alike, so they give the same bits."""
    if dtype is None or _fp8_on():
        return weight
    return _cast(weight, dtype)


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


_PARALLEL_MODES = (None, "column", "row")


def _reject_unsupported(owner: str, options: dict) -> None:
    """Transformer Engine's userbuffers options (`ub_*`) are accepted only at
    their defaults (False / None): the overlap they ask for is communication,
    which this library does not do. Anything else is an unknown argument."""
    for name, value in options.items():
        if not name.startswith("ub_"):
            raise TypeError(f"{owner}.__init__() got an unexpected keyword argument {name!r}")
        if value is not None and value is not False:
            raise ValueError(f"grouped_linear: {name}={value!r}: Transformer Engine's userbuffers "
                             "communication overlap is not supported (grouped_linear does no "
                             "tensor-parallel communication); drop the argument or pass False/None")


def _resolve_tp_size(tp_size, tp_group) -> int:
    """TE's rule: the group's size when `tp_group` is given, else `tp_size`."""
    if tp_group is None:
        return _check_positive_int("tp_size", tp_size)
    size = getattr(tp_group, "size", None)
    try:
        # ProcessGroup.size() needs no initialized default group.
        value = size() if callable(size) else torch.distributed.get_world_size(tp_group)
    except Exception as error:  # noqa: BLE001 (reported as the argument's fault)
        raise TypeError(f"grouped_linear: tp_group: could not read its size ({error}); expected "
                        "a torch.distributed ProcessGroup or None") from error
    return _check_positive_int("tp_group size", value)


def _shard(name: str, features: int, tp_size: int, mode: str) -> int:
    if features % tp_size != 0:
        raise ValueError(f"grouped_linear: {name}={features} is not divisible by tp_size="
                         f"{tp_size}; parallel_mode={mode!r} gives each rank {name}/tp_size")
    return features // tp_size


def _check_parallel_mode(parallel_mode) -> None:
    if parallel_mode not in _PARALLEL_MODES:
        raise ValueError(f"grouped_linear: parallel_mode: got {parallel_mode!r}; expected None, "
                         "'column' or 'row'")


def _mark_tensor_parallel(weight: torch.Tensor, parallel_mode, grouped: bool) -> None:
    # Megatron's attributes, as TE sets them on each [out, in] weight; the
    # fused [G, out, in] weight's dimensions are one further on.
    weight.tensor_model_parallel = True
    weight.partition_dim = (1 if parallel_mode == "row" else 0) + (1 if grouped else 0)
    weight.partition_stride = 1


def _resolve_dtype(params_dtype) -> torch.dtype:
    dtype = torch.get_default_dtype() if params_dtype is None else params_dtype
    if dtype not in _SUPPORTED_DTYPES:
        raise TypeError(f"grouped_linear: params_dtype: {dtype} is not supported; expected "
                        "torch.float32, torch.float16 or torch.bfloat16")
    return dtype


def _rng_context(module):
    """TE's initialization under a model-parallel RNG tracker: inside
    `get_rng_state_tracker().fork(rng_tracker_name)` when one is given."""
    if module.get_rng_state_tracker is None:
        return contextlib.nullcontext()
    tracker = module.get_rng_state_tracker()
    return tracker.fork(module.rng_tracker_name) if module.rng_tracker_name else tracker.fork()


def _backward_dw(self) -> None:
    """delay_wgrad_compute: compute the weight and bias gradients stashed by
    the oldest backward not yet handled. They are added to `weight.grad` /
    `bias.grad` (set when None), or the weight gradient to `weight.main_grad`
    under fuse_wgrad_accumulation; then the hooks registered with
    `register_wgrad_accumulation_and_reduce_hooks` run. Without
    delay_wgrad_compute, or with nothing stashed, this does nothing (as in
    Transformer Engine)."""
    if _C.backward_dw(self._config, self.weight, self.bias):
        for hook in self.wgrad_accumulation_and_reduce_hooks:
            hook()


def _need_backward_dw(self) -> bool:
    """Whether backward leaves weight gradients to `backward_dw()`."""
    return self.delay_wgrad_compute


def _register_wgrad_hook(self, hook: Callable[[], None]) -> None:
    """A callable run after each `backward_dw()` that computed gradients
    (Megatron registers its gradient reduction here)."""
    if not callable(hook):
        raise TypeError(f"grouped_linear: hook: got {hook!r}, expected a callable")
    self.wgrad_accumulation_and_reduce_hooks.append(hook)


def _options_repr(module) -> str:
    text = ""
    if module.delay_wgrad_compute:
        text += ", delay_wgrad_compute=True"
    if module.parallel_mode is not None:
        text += f", parallel_mode={module.parallel_mode!r}, tp_size={module.tp_size}"
    return text


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

    `delay_wgrad_compute=True`: backward computes the input gradient only and
    stashes what the weight and bias gradients need; `backward_dw()` computes
    them (oldest stashed backward first). `parallel_mode` ("column": the
    weights hold out_features/tp_size rows; "row": in_features/tp_size
    columns), `tp_size` and `tp_group` (its size wins) only shape the
    parameters: as in TE's GroupedLinear, no communication happens here.
    docs/API.md has the full reference.
    """

    def __init__(self, num_gemms: int, in_features: int, out_features: int, bias: bool = True,
                 *, params_dtype: Optional[torch.dtype] = None,
                 device: Optional[Union[torch.device, str]] = None,
                 fuse_wgrad_accumulation: bool = False, return_bias: bool = False,
                 init_method: Optional[Callable[[torch.Tensor], None]] = None,
                 save_original_input: bool = False, delay_wgrad_compute: bool = False,
                 parallel_mode: Optional[str] = None, tp_size: int = 1, tp_group=None,
                 sequence_parallel: bool = False,
                 get_rng_state_tracker: Optional[Callable] = None,
                 rng_tracker_name: Optional[str] = None, name: Optional[str] = None,
                 **ub_options):
        super().__init__()
        _reject_unsupported(type(self).__name__, ub_options)
        self.num_gemms = _check_positive_int("num_gemms", num_gemms)
        in_features = _check_positive_int("in_features", in_features)
        out_features = _check_positive_int("out_features", out_features)
        _check_parallel_mode(parallel_mode)
        self.tp_size = _resolve_tp_size(tp_size, tp_group)
        self.tp_group = tp_group
        self.parallel_mode = parallel_mode
        if parallel_mode == "column":
            out_features = _shard("out_features", out_features, self.tp_size, parallel_mode)
        elif parallel_mode == "row":
            in_features = _shard("in_features", in_features, self.tp_size, parallel_mode)
        if self.tp_size > 1 and bias:
            # TE's rule: the bias would be added on every rank before the
            # caller's reduction.
            raise ValueError(f"grouped_linear: bias=True with tp_size={self.tp_size}: not "
                             "supported (as in Transformer Engine, the tensor-parallel "
                             "communication happens outside this module); pass bias=False")
        # As in TE: only meaningful with tensor parallelism, and used by
        # nothing here (no communication).
        self.sequence_parallel = self.tp_size > 1 and bool(sequence_parallel)
        self.in_features = in_features
        self.out_features = out_features
        self.use_bias = bool(bias)
        self.fuse_wgrad_accumulation = bool(fuse_wgrad_accumulation)
        self.return_bias = bool(return_bias)
        self.delay_wgrad_compute = bool(delay_wgrad_compute)
        self.init_method = init_method
        self.get_rng_state_tracker = get_rng_state_tracker
        self.rng_tracker_name = rng_tracker_name
        self.name = name
        self.wgrad_accumulation_and_reduce_hooks = []
        dtype = _resolve_dtype(params_dtype)
        device = _resolve_device(device)

        self.weight = Parameter(torch.empty(num_gemms, out_features, in_features, dtype=dtype,
                                            device=device))
        if self.use_bias:
            self.bias = Parameter(torch.empty(num_gemms, out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        _mark_tensor_parallel(self.weight, parallel_mode, grouped=True)
        self.save_original_input = bool(save_original_input)
        self._config = _C.LinearConfig(fuse_wgrad_accumulation=self.fuse_wgrad_accumulation,
                                       save_original_input=self.save_original_input,
                                       delay_wgrad_compute=self.delay_wgrad_compute)
        self._fp8_state = _C.fp8.ModuleState(num_gemms, "GroupedLinear")
        self.register_state_dict_post_hook(save_per_expert)
        self.register_load_state_dict_pre_hook(load_per_expert)
        self.register_load_state_dict_pre_hook(fill_missing_extra_state)
        if device.type != "meta":
            self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad(), _rng_context(self):
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
        amp = _amp_dtype(inp)
        inp, weight = _cast(inp, amp), _cast_weight(self.weight, amp)
        fused_bias = None if self.return_bias else _cast(self.bias, amp)
        if _is_compiling():  # dynamo cannot trace the pybind call
            out = _compile.forward(self, inp, weight, fused_bias, m_splits, is_first_microbatch)
        else:
            out = _C.grouped_linear(inp, weight, fused_bias, m_splits, main_grad, self._config,
                                    self._fp8_state, is_first_microbatch)
        if self.return_bias:
            bias = _cast(self.bias, amp)
            return out, (list(bias.unbind(0)) if bias is not None else None)
        return out

    backward_dw = _backward_dw
    need_backward_dw = _need_backward_dw
    register_wgrad_accumulation_and_reduce_hooks = _register_wgrad_hook

    # FP8 state in checkpoints, under Transformer Engine's key `_extra_state`.
    def get_extra_state(self):
        return self._fp8_state.state_dict()

    def set_extra_state(self, state) -> None:
        self._fp8_state.load_state_dict(state)

    def extra_repr(self) -> str:
        text = (f"num_gemms={self.num_gemms}, in_features={self.in_features}, "
                f"out_features={self.out_features}, bias={self.use_bias}, "
                f"fuse_wgrad_accumulation={self.fuse_wgrad_accumulation}")
        return text + _options_repr(self)


class Linear(torch.nn.Module):
    """y = x Wᵀ + b, the one-group case of GroupedLinear, on the same engines.

    Parameters `weight` [out, in] and `bias` [out], as torch.nn.Linear and TE's
    Linear name them. `delay_wgrad_compute` / `backward_dw()` as in
    GroupedLinear. Tensor parallelism: TE's Linear communicates for
    parallel_mode "column"/"row" with more than one rank, which this library
    does not do, so the TP arguments are accepted for tp_size 1 only.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 params_dtype: Optional[torch.dtype] = None,
                 device: Optional[Union[torch.device, str]] = None,
                 fuse_wgrad_accumulation: bool = False, return_bias: bool = False,
                 init_method: Optional[Callable[[torch.Tensor], None]] = None,
                 save_original_input: bool = False, delay_wgrad_compute: bool = False,
                 parallel_mode: Optional[str] = None, tp_size: int = 1, tp_group=None,
                 sequence_parallel: bool = False,
                 get_rng_state_tracker: Optional[Callable] = None,
                 rng_tracker_name: Optional[str] = None, parameters_split=None,
                 name: Optional[str] = None, **ub_options):
        super().__init__()
        _reject_unsupported(type(self).__name__, ub_options)
        self.in_features = _check_positive_int("in_features", in_features)
        self.out_features = _check_positive_int("out_features", out_features)
        _check_parallel_mode(parallel_mode)
        self.tp_size = _resolve_tp_size(tp_size, tp_group)
        if parallel_mode is not None and self.tp_size > 1:
            raise ValueError(f"grouped_linear: Linear with parallel_mode={parallel_mode!r} and "
                             f"tp_size={self.tp_size}: Transformer Engine's Linear gathers or "
                             "reduces across the tensor-parallel group there, and grouped_linear "
                             "does no communication; use tp_size=1 (or GroupedLinear, whose TE "
                             "counterpart leaves communication to the caller too)")
        if parameters_split is not None:
            raise ValueError(f"grouped_linear: parameters_split={parameters_split!r}: not "
                             "supported; Linear keeps one weight (split it after the forward)")
        self.tp_group = tp_group
        self.parallel_mode = parallel_mode
        self.sequence_parallel = self.tp_size > 1 and bool(sequence_parallel)
        self.use_bias = bool(bias)
        self.fuse_wgrad_accumulation = bool(fuse_wgrad_accumulation)
        self.return_bias = bool(return_bias)
        self.delay_wgrad_compute = bool(delay_wgrad_compute)
        self.init_method = init_method
        self.get_rng_state_tracker = get_rng_state_tracker
        self.rng_tracker_name = rng_tracker_name
        self.name = name
        self.wgrad_accumulation_and_reduce_hooks = []
        dtype = _resolve_dtype(params_dtype)
        device = _resolve_device(device)
        self.weight = Parameter(torch.empty(out_features, in_features, dtype=dtype, device=device))
        if self.use_bias:
            self.bias = Parameter(torch.empty(out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        _mark_tensor_parallel(self.weight, parallel_mode, grouped=False)
        self.save_original_input = bool(save_original_input)
        self._config = _C.LinearConfig(fuse_wgrad_accumulation=self.fuse_wgrad_accumulation,
                                       save_original_input=self.save_original_input,
                                       delay_wgrad_compute=self.delay_wgrad_compute)
        self._fp8_state = _C.fp8.ModuleState(1, "Linear")
        self.register_load_state_dict_pre_hook(fill_missing_extra_state)
        if device.type != "meta":
            self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad(), _rng_context(self):
            if self.init_method is None:
                torch.nn.init.normal_(self.weight, mean=0.0, std=_DEFAULT_INIT_STD)
            else:
                self.init_method(self.weight)
            if self.bias is not None:
                self.bias.zero_()

    def forward(self, inp: torch.Tensor, is_first_microbatch: Optional[bool] = None):
        main_grad = getattr(self.weight, "main_grad", None) if self.fuse_wgrad_accumulation else None
        amp = _amp_dtype(inp)
        inp, weight = _cast(inp, amp), _cast_weight(self.weight, amp)
        fused_bias = None if self.return_bias else _cast(self.bias, amp)
        if _is_compiling():
            out = _compile.forward(self, inp, weight, fused_bias, None, is_first_microbatch)
        else:
            out = _C.linear(inp, weight, fused_bias, main_grad, self._config, self._fp8_state,
                            is_first_microbatch)
        if self.return_bias:
            return out, _cast(self.bias, amp)
        return out

    backward_dw = _backward_dw
    need_backward_dw = _need_backward_dw
    register_wgrad_accumulation_and_reduce_hooks = _register_wgrad_hook

    def get_extra_state(self):
        return self._fp8_state.state_dict()

    def set_extra_state(self, state) -> None:
        self._fp8_state.load_state_dict(state)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.use_bias}") + _options_repr(self)
