"""FP8 recipes and autocast.

The recipes follow Transformer Engine's names and defaults
(`transformer_engine.common.recipe`), so switching is a change of import.
Each is a dataclass mirrored by a C++ value (`_C.fp8.Recipe`), built once
when an `autocast` region is entered; modules read the thread's C++ state,
not these objects.

So far this is the recipe layer and the CPU quantization reference
(`quantize`, `quantize_blockwise`): FP8 GEMMs are not wired into the modules
yet.
"""

import contextlib
import enum
from dataclasses import dataclass
from typing import Optional, Union

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
class DelayedScaling:
    """Per-tensor scales from a history of amax values of earlier steps."""
    margin: int = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"   # or "most_recent"

    def to_native(self) -> "_C.fp8.Recipe":
        return _C.fp8.Recipe("delayed", _format_name(self.fp8_format), margin=self.margin,
                             amax_history_len=self.amax_history_len,
                             amax_compute_algo=self.amax_compute_algo)


@dataclass(frozen=True)
class Float8CurrentScaling:
    """Per-tensor scales from the tensor's own amax, computed on every cast."""
    fp8_format: Format = Format.HYBRID

    def to_native(self) -> "_C.fp8.Recipe":
        return _C.fp8.Recipe("current", _format_name(self.fp8_format))


@dataclass(frozen=True)
class Float8BlockScaling:
    """One fp32 scale (a power of two) per 1x128 tile of activations and
    gradients and per 128x128 tile of weights; E4M3 everywhere by default."""
    fp8_format: Format = Format.E4M3

    def to_native(self) -> "_C.fp8.Recipe":
        return _C.fp8.Recipe("block", _format_name(self.fp8_format), power_2_scales=True)


Recipe = Union[DelayedScaling, Float8CurrentScaling, Float8BlockScaling]


class autocast(contextlib.ContextDecorator):
    """`with grouped_linear.autocast(enabled=True, recipe=...):` or as a
    decorator. Regions nest (the innermost wins) and belong to the thread
    that entered them. The recipe is turned into its C++ value once, on
    entry."""

    def __init__(self, enabled: bool = True, recipe: Optional[Recipe] = None):
        if not isinstance(enabled, bool):
            raise TypeError(f"grouped_linear: enabled: got {enabled!r}, expected a bool")
        recipe = DelayedScaling() if recipe is None else recipe
        if not hasattr(recipe, "to_native"):
            raise TypeError(f"grouped_linear: recipe: got {type(recipe).__name__}, expected "
                            "DelayedScaling, Float8CurrentScaling or Float8BlockScaling")
        self.enabled = enabled
        self.recipe = recipe
        self._native = recipe.to_native()

    def __enter__(self):
        _C.fp8.autocast_push(self.enabled, self._native)
        return self

    def __exit__(self, *exc):
        _C.fp8.autocast_pop()
        return False


def is_enabled() -> bool:
    """Whether the calling thread is inside an enabled autocast region."""
    return _C.fp8.autocast_enabled()


def current_recipe() -> "_C.fp8.Recipe":
    """The C++ recipe of the innermost region on this thread."""
    return _C.fp8.autocast_recipe()


quantize = _C.fp8.quantize
dequantize = _C.fp8.dequantize
quantize_blockwise = _C.fp8.quantize_blockwise
dequantize_blockwise = _C.fp8.dequantize_blockwise
scale_from_amax = _C.fp8.scale_from_amax
format_max = _C.fp8.format_max
update_delayed_scaling = _C.fp8.update_delayed_scaling
