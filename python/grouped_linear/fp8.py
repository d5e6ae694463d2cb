"""FP8 recipes and autocast.

The recipes follow Transformer Engine's names and defaults
(`transformer_engine.common.recipe`), so switching is a change of import.
Each is a dataclass mirrored by a C++ value (`_C.fp8.Recipe`), built once
when an `autocast` region is entered; modules read the thread's C++ state,
not these objects.

Inside an enabled region GroupedLinear and Linear run their three products
in FP8 with the region's recipe; each module keeps its FP8 state (amax
histories and scales for delayed scaling, cached quantized weights) in a C++
object saved as the module's `_extra_state`.

Delayed scaling's step boundary: when the outermost region of a thread
exits, every module that ran an FP8 forward in it updates its scales from
its amax history and rolls the history (forward and backward tensors at
once; amaxes of a backward that runs after the exit are rolled at the next
boundary). `set_amax_check(True)` makes a non-finite amax raise there,
naming the module and tensor.

Also here: the CPU quantization reference (`quantize`, `quantize_blockwise`)
the GPU kernels are checked against.
"""

import contextlib
import enum
import threading
from dataclasses import dataclass
from typing import Optional, Union

import torch

from . import _C


class Format(enum.Enum):
    """FP8 formats of a recipe. HYBRID: E4M3 forward, E5M2 for gradients."""
    E4M3 = "E4M3"
    E5M2 = "E5M2"
    HYBRID = "HYBRID"


def _format_name(value: Union[Format, str], what: str = "fp8_format") -> str:
    if isinstance(value, Format):
        return value.value
    if isinstance(value, str) and value in Format.__members__:
        return value
    raise TypeError(f"grouped_linear: {what}: got {value!r}, expected a grouped_linear.fp8.Format")


@dataclass(frozen=True)
class MMParams:
    """Options of one FP8 GEMM, as Transformer Engine's `MMParams`.
    use_split_accumulator=True accumulates in float32 (the tensor core's
    partial sums promoted into float32 registers every k-block); False
    allows fast accumulation in the tensor core's narrower accumulator
    (faster, less precise over long reductions: Hopper keeps about 14 bits
    of the running sum, as the DeepSeek-V3 report measured). The CPU
    emulation sums in float32 either way; Float8BlockScaling's kernels
    always promote per block."""
    use_split_accumulator: bool = True

    def __post_init__(self):
        if not isinstance(self.use_split_accumulator, bool):
            raise TypeError(f"grouped_linear: use_split_accumulator: got "
                            f"{self.use_split_accumulator!r}, expected a bool")


# Transformer Engine's defaults: the forward GEMM with fast accumulation
# (its _2X_ACC_FPROP = False), both gradient GEMMs in float32.
_FAST = MMParams(use_split_accumulator=False)
_SPLIT = MMParams(use_split_accumulator=True)


def _check_gemm_params(recipe) -> None:
    for name in ("fp8_gemm_fprop", "fp8_gemm_dgrad", "fp8_gemm_wgrad"):
        value = getattr(recipe, name)
        if not isinstance(value, MMParams):
            raise TypeError(f"grouped_linear: {name}: got {value!r}, "
                            "expected a grouped_linear.fp8.MMParams")


def _gemm_kwargs(recipe) -> dict:
    _check_gemm_params(recipe)
    return dict(fprop_split_accumulator=recipe.fp8_gemm_fprop.use_split_accumulator,
                dgrad_split_accumulator=recipe.fp8_gemm_dgrad.use_split_accumulator,
                wgrad_split_accumulator=recipe.fp8_gemm_wgrad.use_split_accumulator)


@dataclass(frozen=True)
class DelayedScaling:
    """Per-tensor scales from a history of amax values of earlier steps.
    fp8_gemm_*: each GEMM's MMParams (Transformer Engine's DelayedScaling
    fixes them to these values; here they can be changed)."""
    margin: int = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"   # or "most_recent"
    fp8_gemm_fprop: MMParams = _FAST
    fp8_gemm_dgrad: MMParams = _SPLIT
    fp8_gemm_wgrad: MMParams = _SPLIT

    def __post_init__(self):
        # Types here (the C++ value checks the ranges): a float or a None
        # would otherwise surface as pybind11's "incompatible arguments".
        for name in ("margin", "amax_history_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"grouped_linear: {name}: got {value!r} "
                                f"({type(value).__name__}); expected an int")
        if not isinstance(self.amax_compute_algo, str):
            raise TypeError(f"grouped_linear: amax_compute_algo: got {self.amax_compute_algo!r}; "
                            "expected 'max' or 'most_recent'")

    def to_native(self) -> "_C.fp8.Recipe":
        return _C.fp8.Recipe("delayed", _format_name(self.fp8_format), margin=self.margin,
                             amax_history_len=self.amax_history_len,
                             amax_compute_algo=self.amax_compute_algo, **_gemm_kwargs(self))


@dataclass(frozen=True)
class Float8CurrentScaling:
    """Per-tensor scales from the tensor's own amax, computed on every cast."""
    fp8_format: Format = Format.HYBRID
    fp8_gemm_fprop: MMParams = _FAST
    fp8_gemm_dgrad: MMParams = _SPLIT
    fp8_gemm_wgrad: MMParams = _SPLIT

    def to_native(self) -> "_C.fp8.Recipe":
        return _C.fp8.Recipe("current", _format_name(self.fp8_format), **_gemm_kwargs(self))


@dataclass(frozen=True)
class Float8BlockScaling:
    """One fp32 scale (a power of two) per 1x128 tile of activations and
    gradients and per 128x128 tile of weights; E4M3 everywhere by default."""
    fp8_format: Format = Format.E4M3
    fp8_gemm_fprop: MMParams = _SPLIT
    fp8_gemm_dgrad: MMParams = _SPLIT
    fp8_gemm_wgrad: MMParams = _SPLIT

    def to_native(self) -> "_C.fp8.Recipe":
        return _C.fp8.Recipe("block", _format_name(self.fp8_format), power_2_scales=True,
                             **_gemm_kwargs(self))


Recipe = Union[DelayedScaling, Float8CurrentScaling, Float8BlockScaling]
_RECIPES = (DelayedScaling, Float8CurrentScaling, Float8BlockScaling)


class autocast(contextlib.ContextDecorator):
    """`with grouped_linear.autocast(enabled=True, recipe=...):` or as a
    decorator. Regions nest (the innermost wins) and belong to the thread
    that entered them. The recipe is turned into its C++ value once, on
    entry."""

    def __init__(self, enabled: bool = True, recipe: Optional[Recipe] = None):
        if not isinstance(enabled, bool):
            raise TypeError(f"grouped_linear: enabled: got {enabled!r}, expected a bool")
        recipe = DelayedScaling() if recipe is None else recipe
        if not isinstance(recipe, _RECIPES):
            got = (f"the class {recipe.__name__} (not an instance)" if isinstance(recipe, type)
                   else type(recipe).__name__)
            raise TypeError(f"grouped_linear: recipe: got {got}, expected an instance of "
                            "DelayedScaling, Float8CurrentScaling or Float8BlockScaling")
        self.enabled = enabled
        self.recipe = recipe
        self._native = recipe.to_native()
        self._codes = _encode(self._native) if enabled else None
        self._depth = threading.local()  # entries of this object, per thread

    def __enter__(self):
        _C.fp8.autocast_push(self.enabled, self._native)
        _compile_stack.append(self._codes)
        self._depth.value = getattr(self._depth, "value", 0) + 1
        return self

    def __exit__(self, *exc):
        depth = getattr(self._depth, "value", 0)
        if depth == 0:
            raise RuntimeError("grouped_linear: autocast: __exit__ without a matching __enter__ "
                               "on this thread (a region is exited once per entry)")
        self._depth.value = depth - 1
        _compile_stack.pop()
        _C.fp8.autocast_pop()
        return False


# A Python mirror of the innermost region's recipe (None: FP8 off), read by
# torch.compile while it traces a module (grouped_linear/_compile.py): dynamo
# cannot call into the C++ state, and guards on this value instead. It is
# process-wide: a graph compiled inside a region is for that recipe.
_compile_stack = []


def _encode(native) -> tuple:
    """The recipe as the ints grouped_linear::fp8_forward takes (encoded in C++,
    beside the decoder)."""
    return tuple(_C._compile_recipe_codes(native))


def is_enabled() -> bool:
    """Whether the calling thread is inside an enabled autocast region."""
    return _C.fp8.autocast_enabled()


def current_recipe() -> "_C.fp8.Recipe":
    """The C++ recipe of the innermost region on this thread."""
    return _C.fp8.autocast_recipe()


def set_amax_check(enabled: bool) -> None:
    """Check mode (process-wide, off by default): at delayed scaling's step
    boundary a non-finite amax raises ValueError naming the module and tensor
    (`input`, `weight3`, `grad_output`), and no scale changes. On CUDA the
    check reads a flag back (a synchronisation): a debugging aid."""
    if not isinstance(enabled, bool):
        raise TypeError(f"grouped_linear: enabled: got {enabled!r}, expected a bool")
    _C.fp8.set_amax_check(enabled)


def amax_check_enabled() -> bool:
    return _C.fp8.amax_check()


def _states_of(module) -> list:
    """The FP8 states of the grouped_linear layers in `module` (itself included)."""
    return [m._fp8_state for m in module.modules()
            if isinstance(getattr(m, "_fp8_state", None), _C.fp8.ModuleState)]


def join_region(*modules) -> None:
    """Register the FP8 state of every GroupedLinear / Linear in `modules`
    (searched with `.modules()`) with this thread's outermost autocast region,
    whose exit then runs their delayed-scaling step boundary; a no-op outside
    any region. For forwards replayed from a CUDA graph (hand-captured, or
    by a tool that replays graphs), which run none of the layers'
    host code and so register nothing themselves: call it inside the region,
    before or after the replay. `grouped_linear.make_graphed_callables`
    calls it on every call."""
    for module in modules:
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"grouped_linear: join_region: got {type(module).__name__}, "
                            "expected torch.nn.Module")
    for module in modules:
        for state in _states_of(module):
            state.join_region()


quantize = _C.fp8.quantize
dequantize = _C.fp8.dequantize
quantize_blockwise = _C.fp8.quantize_blockwise
dequantize_blockwise = _C.fp8.dequantize_blockwise
scale_from_amax = _C.fp8.scale_from_amax
format_max = _C.fp8.format_max
update_delayed_scaling = _C.fp8.update_delayed_scaling
