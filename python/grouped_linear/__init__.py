"""grouped_linear: the expert layers of Mixture-of-Experts training.

`GroupedLinear` runs G linear layers on the row groups of one input, with one
call into C++ per forward whatever G is; `Linear` is its one-group case.
"""

import torch  # noqa: F401  (loads libtorch before the extension)

from . import _C
from . import fp8
from . import ops
from .fp8 import autocast
from .graphs import make_graphed_callables
from .module import GroupedLinear, Linear
from .recompute import activation_checkpoint

__version__ = "0.1.0"

__all__ = ["GroupedLinear", "Linear", "autocast", "fp8", "ops", "make_graphed_callables",
           "activation_checkpoint", "engine_for", "with_cuda", "build_info", "__version__"]

with_cuda = _C.with_cuda


def _read_build_info() -> dict:
    # Written at build time (cmake/build_info.cmake); absent where the
    # package was put together some other way.
    try:
        from . import _build_info
    except ImportError:
        return {"commit": "unknown", "sm90_tuning": False}
    return {"commit": _build_info.commit, "sm90_tuning": bool(_build_info.sm90_tuning)}


# What this installed package was built from: the commit (with "-dirty" when
# tracked files differed from it) and whether the tuning candidates were built.
build_info = _read_build_info()


def engine_for(device) -> str:
    """Name of the grouped GEMM engine that runs problems on `device`."""
    return _C.engine_for(torch.device(device))
