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
           "activation_checkpoint", "engine_for", "with_cuda", "__version__"]

with_cuda = _C.with_cuda


def engine_for(device) -> str:
    """Name of the grouped GEMM engine that runs problems on `device`."""
    return _C.engine_for(torch.device(device))
