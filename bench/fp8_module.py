"""End to end: GroupedLinear forward+backward in FP8 against the same layer in
bf16, quantization included.

One step = enter `grouped_linear.autocast(recipe)`, forward, leave it (the
delayed-scaling step boundary runs here), backward with a prepared gradient,
gradients reset to None. bf16 is the same step without autocast. Each FP8
recipe's figure is given as a speedup over bf16 in the same process (the
issue's target: at least 1.5 on the dsv3 and mixtral cases).
`fp8_delayed_cached_weights` is a later micro-batch of a step: the weights'
FP8 copies come from the first micro-batch (`is_first_microbatch=False`).
"""

import statistics
import sys
import traceback
from typing import Dict, List, Sequence

import torch

import grouped_linear
from grouped_linear import fp8

from .cases import ThroughputCase, make_splits, splits_summary
from .report import each_case, log, short_error

RECIPES = {
    "fp8_delayed": lambda: fp8.DelayedScaling(),
    "fp8_current": lambda: fp8.Float8CurrentScaling(),
    "fp8_block": lambda: fp8.Float8BlockScaling(),
}
# The end-to-end cases.
CASE_PREFIXES = ("dsv3", "mixtral")


# Micro-batches after the first of a step reuse the weights quantized by the
# first (`is_first_microbatch=False`), as in gradient accumulation; this row
# measures such a micro-batch, where FP8 skips the weight quantization.
CACHED = {"fp8_delayed_cached_weights": lambda: fp8.DelayedScaling()}


def step_fn(layer, x, dy, splits, recipe, first_microbatch=None):
    def step():
        if recipe is None:
            out = layer(x, splits)
        else:
            with grouped_linear.autocast(recipe=recipe):
                out = layer(x, splits, is_first_microbatch=first_microbatch)
        out.backward(dy)
        layer.weight.grad = None
        x.grad = None
    return step


# Every step measured: bf16, each recipe, the cached-weights micro-batch.
STEPS = {"bf16": None, **RECIPES, **CACHED}


def case_inputs(case: ThroughputCase, device):
    """The case's bf16 layer (no bias, as MoE experts), input (requiring grad)
    and prepared output gradient."""
    gen = torch.Generator(device=device).manual_seed(0)
    layer = grouped_linear.GroupedLinear(case.G, case.K, case.N, bias=False,
                                         params_dtype=torch.bfloat16, device=device)
    x = (torch.randn(case.T, case.K, device=device, generator=gen)
         .to(torch.bfloat16).requires_grad_(True))
    dy = (torch.randn(case.T, case.N, device=device, generator=gen) * 0.01).to(torch.bfloat16)
    return layer, x, dy


def named_step(name: str, layer, x, dy, splits):
    """The step `name` of STEPS; a cached-weights one first runs a first
    micro-batch, which fills the cache."""
    make = STEPS[name]
    recipe = None if make is None else make()
    first = None
    if name in CACHED:
        step_fn(layer, x, dy, splits, recipe, first_microbatch=True)()
        first = False
    return step_fn(layer, x, dy, splits, recipe, first_microbatch=first)


def measure_case(case: ThroughputCase, device, timer, warmup: int, reps: int,
                 routings: Sequence[str]) -> List[dict]:
    layer, x, dy = case_inputs(case, device)
    records = []
    for routing in routings:
        splits = make_splits(routing, case.G, case.T)
        impls: Dict[str, dict] = {}
        for name in STEPS:
            try:
                fn = named_step(name, layer, x, dy, splits)
                times = timer.per_run_seconds(fn, warmup, reps)
                med = statistics.median(times)
                impls[name] = {"median_ms": med * 1e3, "min_ms": min(times) * 1e3,
                               "reps": len(times), "tflops": 3 * case.flops() / med / 1e12}
            except Exception as exc:  # noqa: BLE001
                impls[name] = {"error": short_error(exc)}
                traceback.print_exc(file=sys.stderr)
        base = impls["bf16"].get("median_ms")
        for entry in impls.values():
            if base and "median_ms" in entry:
                entry["speedup_over_bf16"] = base / entry["median_ms"]
        records.append({"case": case.name, "G": case.G, "K": case.K, "N": case.N, "T": case.T,
                        "routing": routing, "splits": splits_summary(splits), "impls": impls})
        log(f"  e2e {case.name:16s} {routing:8s} " + "  ".join(
            f"{n}={e['median_ms']:.3f}ms" if "median_ms" in e else f"{n}=err"
            for n, e in impls.items()))
    return records


def run(cases: Sequence[ThroughputCase], device, timer, warmup: int, reps: int,
        routings: Sequence[str]) -> List[dict]:
    return each_case([c for c in cases if c.name.startswith(CASE_PREFIXES)], timer,
                     lambda c: f"fp8 end to end {c.name}",
                     lambda c: measure_case(c, device, timer, warmup, reps, routings))
