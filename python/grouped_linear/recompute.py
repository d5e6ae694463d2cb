"""Activation checkpointing of grouped_linear layers, FP8 included.

`torch.utils.checkpoint` repeats a function's forward in backward. Under FP8
that repeat must run as the forward did: with the same recipe, although
backward usually runs after the `grouped_linear.autocast` region has exited,
and with the same delayed scaling scales, although that exit has updated
them, and without recording its amaxes a second time. `activation_checkpoint`
is `torch.utils.checkpoint.checkpoint` (non-reentrant) with a context that
records each layer's forward scales while the forward runs, and one that
replays them, under the forward's recipe, while the recomputation runs.
"""

import torch

from . import _C


class _Capturing:
    """Around the forward: the layers' scales are recorded into `scope`."""

    def __init__(self, scope):
        self.scope = scope

    def __enter__(self):
        _C.fp8.recompute_capture_enter(self.scope)

    def __exit__(self, *exc):
        _C.fp8.recompute_capture_exit()
        return False


class _Replaying:
    """Around the recomputation: the forward's autocast state (no region
    opened, no step boundary at the end) and its recorded scales."""

    def __init__(self, scope, enabled: bool, recipe):
        self.scope, self.enabled, self.recipe = scope, enabled, recipe

    def __enter__(self):
        _C.fp8.recompute_replay_enter(self.scope, self.enabled, self.recipe)

    def __exit__(self, *exc):
        _C.fp8.recompute_replay_exit()
        return False


def activation_checkpoint(function, *args, use_reentrant: bool = False, **kwargs):
    """`torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False,
    **kwargs)` whose recomputation in backward runs the grouped_linear layers
    as the forward ran them: under the autocast recipe the forward saw (FP8
    or not), casting with the delayed-scaling scales the forward used and
    recording no amax, wherever backward runs (Transformer Engine's
    `te.checkpoint`). Only the non-reentrant form exists (`use_reentrant`
    other than False: ValueError); `context_fn` is this function's own
    (ValueError if given)."""
    if use_reentrant is not False:
        raise ValueError(f"grouped_linear: activation_checkpoint: use_reentrant: got "
                         f"{use_reentrant!r}, expected False (the non-reentrant form only)")
    if "context_fn" in kwargs:
        raise ValueError("grouped_linear: activation_checkpoint: context_fn is set by "
                         "activation_checkpoint itself")
    enabled, recipe = _C.fp8.autocast_enabled(), _C.fp8.autocast_recipe()
    scope = _C.fp8.RecomputeScope()

    def context_fn():
        return _Capturing(scope), _Replaying(scope, enabled, recipe)

    return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False,
                                             context_fn=context_fn, **kwargs)
