"""CUDA graphs of callables that hold GroupedLinear / Linear layers under FP8.

`torch.cuda.make_graphed_callables` replaces a module's forward and backward
with graph replays, so none of the layers' host code runs on a call. Their
FP8 kernels still read the scales and record amaxes in the layers' state
buffers, but delayed scaling's step boundary (the exit of the outermost
`grouped_linear.autocast` region) updates only the states that a forward
registered with the region, and a replayed forward registers none: the
scales would stay as they were at capture. The callables returned here join
each call's region with the FP8 state of every layer they hold first
(`fp8.join_region`), as Transformer Engine's `make_graphed_callables` does
for its modules.
"""

import contextlib
import functools
from typing import List

import torch

from . import _C
from .fp8 import Recipe, _states_of, autocast


def _fp8_states(callable_) -> List["_C.fp8.ModuleState"]:
    """The FP8 states of the grouped_linear layers a module holds (none for a
    plain function: pass modules)."""
    return _states_of(callable_) if isinstance(callable_, torch.nn.Module) else []


def _joining(call, states, fp8_enabled: bool):
    @functools.wraps(call)
    def joined(*args, **kwargs):
        if fp8_enabled and _C.fp8.autocast_depth() == 0:
            raise RuntimeError(
                "grouped_linear: this callable was captured with fp8_enabled=True; call it "
                "inside grouped_linear.autocast, whose exit updates its layers' FP8 scaling")
        for state in states:
            state.join_region()
        return call(*args, **kwargs)
    return joined


def make_graphed_callables(callables, sample_args, *, fp8_enabled: bool = False,
                           fp8_recipe: Recipe = None, **kwargs):
    """`torch.cuda.make_graphed_callables(callables, sample_args, **kwargs)`
    (`num_warmup_iters`, `allow_unused_input`, `pool`), with the warm-up and
    the capture inside `grouped_linear.autocast(recipe=fp8_recipe)` when
    `fp8_enabled`. Returns what torch returns (the modules, their forward
    replaced; graphed functions), each call of which first joins the
    caller's autocast region with the FP8 state of the grouped_linear layers
    it holds. Call FP8-captured callables inside `grouped_linear.autocast`
    (RuntimeError otherwise): the graph runs the recipe it was captured
    with, and the region's exit updates the layers' delayed scaling."""
    if not isinstance(fp8_enabled, bool):
        raise TypeError(f"grouped_linear: fp8_enabled: got {fp8_enabled!r}, expected a bool")
    if fp8_recipe is not None and not fp8_enabled:
        raise ValueError("grouped_linear: fp8_recipe is given but fp8_enabled is False")
    single = not isinstance(callables, tuple)
    region = autocast(recipe=fp8_recipe) if fp8_enabled else contextlib.nullcontext()
    with region:
        graphed = torch.cuda.make_graphed_callables(callables, sample_args, **kwargs)
    originals = (callables,) if single else callables
    results = (graphed,) if single else graphed
    out = []
    for original, result in zip(originals, results):
        states = _fp8_states(original)
        if isinstance(result, torch.nn.Module):
            result.forward = _joining(result.forward, states, fp8_enabled)
        else:
            result = _joining(result, states, fp8_enabled)
        out.append(result)
    return out[0] if single else tuple(out)
