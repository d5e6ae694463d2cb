"""Host cost per call on tiny problems, where the GPU has almost nothing to do.

µs per call = host wall time to issue `calls` calls without synchronising,
divided by the count (after warm-up); beside it the GPU time per call, from
events around the same loop. GPU time ≈ host time means the GPU sat waiting
for the host: the host is the bottleneck.

Modes: forward under torch.no_grad, forward with grad enabled (weights need
grad, so the autograd graph is built), and forward+backward. The backward
takes a prepared random gradient (out.backward(dy)) rather than
out.sum().backward(): sum's gradient is a stride-0 expanded tensor, which
F.grouped_mm's backward rejects (seen with torch 2.13 on the CPU), and a
prepared gradient is the same work for every implementation. Gradients are
reset to None after each step, as zero_grad(set_to_none=True) does, so no
accumulation kernels are timed.
"""

import contextlib
import statistics
import sys
import traceback
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Sequence, Tuple

import torch

import grouped_linear

from . import peers
from .cases import HostCase, csv_list, uniform_splits
from .report import log, short_error

MODES = ("fwd_no_grad", "fwd_grad", "fwd_bwd")

# Linear: the one-group layer, K = N = 256 and 16 rows like the tiny cases.
LINEAR_CASE = HostCase("linear_16rows", G=1, K=256, N=256, rows_per_group=16)


@dataclass
class Settings:
    warmup: int
    calls: int
    batches: int
    dtype: torch.dtype = torch.bfloat16


@dataclass
class Candidate:
    name: str
    forward: Callable[[torch.Tensor], torch.Tensor]   # x -> out, with autograd
    params: Sequence[torch.Tensor]
    # Entered once around the measured loop: the FP8 candidates run inside
    # one autocast region, as a model's layers do within a step (the step
    # boundary, once per step for all layers, is not part of a call).
    region: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext


def grouped_candidates(case: HostCase, device: torch.device, dtype: torch.dtype) -> List[Candidate]:
    splits = uniform_splits(case.G, case.T)
    splits_on_device = torch.tensor(splits, dtype=torch.int64, device=device)
    offs = peers.group_ends(splits, device)
    # bias=False everywhere: MoE expert layers (Mixtral, DeepSeek-V3, Qwen3) have none.
    gl = grouped_linear.GroupedLinear(case.G, case.K, case.N, bias=False, params_dtype=dtype,
                                      device=device)
    loop = peers.LoopExperts(case.G, case.K, case.N, dtype=dtype, device=device)
    out = [
        Candidate("grouped_linear", lambda x: gl(x, splits), list(gl.parameters())),
        # The router's form: counts on the device. The cuBLAS engine reads
        # them back (a sync); the grouped engines are meant not to.
        Candidate("grouped_linear_dev_splits", lambda x: gl(x, splits_on_device),
                  list(gl.parameters())),
        Candidate("loop_F.linear", lambda x: loop(x, splits), list(loop.parameters())),
    ]
    if device.type == "cuda" and torch.cuda.get_device_capability(device) == (9, 0):
        for label, recipe in (("delayed", grouped_linear.fp8.DelayedScaling),
                              ("current", grouped_linear.fp8.Float8CurrentScaling)):
            out.append(Candidate(f"grouped_linear_fp8_{label}", lambda x: gl(x, splits),
                                 list(gl.parameters()),
                                 lambda recipe=recipe: grouped_linear.autocast(recipe=recipe())))
        # A later micro-batch: the FP8 weights of the first call are reused
        # (is_first_microbatch=False; the first warm-up call fills the cache).
        out.append(Candidate("grouped_linear_fp8_delayed_cached_weights",
                             lambda x: gl(x, splits, is_first_microbatch=False),
                             list(gl.parameters()),
                             lambda: grouped_linear.autocast(
                                 recipe=grouped_linear.fp8.DelayedScaling())))
    if peers.has_grouped_mm():
        gmm = peers.GroupedMMExperts(case.G, case.K, case.N, dtype=dtype, device=device)
        out.append(Candidate("F.grouped_mm", lambda x: gmm(x, offs), list(gmm.parameters())))
    # torch's own floor for the same loop: a view, no kernel, no parameter.
    # Its fwd+bwd is the autograd engine's fixed cost of one backward() call,
    # which every implementation above pays too.
    out.append(Candidate("autograd_floor", lambda x: x.view_as(x), []))
    return out


def linear_candidates(case: HostCase, device: torch.device, dtype: torch.dtype) -> List[Candidate]:
    ours = grouped_linear.Linear(case.K, case.N, bias=False, params_dtype=dtype, device=device)
    theirs = torch.nn.Linear(case.K, case.N, bias=False, dtype=dtype, device=device)
    return [Candidate("grouped_linear.Linear", ours, list(ours.parameters())),
            Candidate("torch.nn.Linear", theirs, list(theirs.parameters()))]


def step_function(candidate: Candidate, mode: str, x: torch.Tensor, x_leaf: torch.Tensor,
                  dy: torch.Tensor) -> Tuple[Callable[[], object], contextlib.AbstractContextManager]:
    """The call to repeat, and the grad mode to repeat it in."""
    if mode == "fwd_no_grad":
        return (lambda: candidate.forward(x)), torch.no_grad()
    if mode == "fwd_grad":
        return (lambda: candidate.forward(x)), torch.enable_grad()
    if mode == "fwd_bwd":
        holders = [x_leaf] + list(candidate.params)

        def step() -> None:
            candidate.forward(x_leaf).backward(dy)
            for t in holders:
                t.grad = None
        return step, torch.enable_grad()
    raise ValueError(mode)


def measure(fn: Callable[[], object], grad_mode, timer, settings: Settings) -> Dict[str, float]:
    with grad_mode:
        for _ in range(settings.warmup):
            fn()
        timer.synchronize()
        host, gpu = [], []
        for _ in range(settings.batches):
            h, g = timer.issue_loop(fn, settings.calls)
            host.append(h)
            if g is not None:
                gpu.append(g)
    result = {"host_us": statistics.median(host) * 1e6, "calls": settings.calls,
              "batches": settings.batches}
    if gpu:
        result["gpu_us"] = statistics.median(gpu) * 1e6
    return result


def case_tensors(case: HostCase, device: torch.device, dtype: torch.dtype):
    """The input, a copy that requires grad (fwd_bwd) and the prepared gradient."""
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(case.T, case.K, dtype=dtype, device=device, generator=gen)
    x_leaf = x.clone().requires_grad_(True)
    dy = torch.randn(case.T, case.N, dtype=dtype, device=device, generator=gen) * 0.01
    return x, x_leaf, dy


def asked_calls(cases: Sequence[HostCase], impls: str, modes: Sequence[str], device: torch.device,
                dtype: torch.dtype = torch.bfloat16) -> Iterator[tuple]:
    """The diagnostics' loop over the table's calls (bench.host_profile,
    bench.kernel_timeline): (case, candidate, mode, fn, grad_mode) for each
    case, each implementation named in `impls` (comma-separated; an unknown
    name exits naming it) and each mode, the case's tensors made once."""
    for case in cases:
        x, x_leaf, dy = case_tensors(case, device, dtype)
        candidates = {c.name: c for c in grouped_candidates(case, device, dtype)}
        for name in csv_list(impls, tuple(candidates), "--impls"):
            for mode in modes:
                fn, grad_mode = step_function(candidates[name], mode, x, x_leaf, dy)
                yield case, candidates[name], mode, fn, grad_mode


def measure_case(case: HostCase, candidates: List[Candidate], device: torch.device, timer,
                 settings: Settings) -> List[dict]:
    x, x_leaf, dy = case_tensors(case, device, settings.dtype)
    records = []
    for mode in MODES:
        record = {"case": case.name, "G": case.G, "K": case.K, "N": case.N, "T": case.T,
                  "mode": mode, "impls": {}}
        for candidate in candidates:
            try:
                fn, grad_mode = step_function(candidate, mode, x, x_leaf, dy)
                with candidate.region():
                    record["impls"][candidate.name] = measure(fn, grad_mode, timer, settings)
            except Exception as exc:  # noqa: BLE001  a failing peer is a result
                record["impls"][candidate.name] = {"error": short_error(exc)}
                if candidate.name.startswith("grouped_linear"):
                    traceback.print_exc(file=sys.stderr)
        records.append(record)
        log(f"  {case.name:14s} {mode:12s} " + "  ".join(
            f"{name}={r['host_us']:.1f}us" if "host_us" in r else f"{name}=err"
            for name, r in record["impls"].items()))
    return records


def run(cases: Sequence[HostCase], device: torch.device, timer, settings: Settings,
        include_linear: bool = True) -> List[dict]:
    records: List[dict] = []
    log("host overhead")
    jobs = [(case, grouped_candidates) for case in cases]
    if include_linear:
        jobs.append((LINEAR_CASE, linear_candidates))
    for case, make_candidates in jobs:
        try:
            candidates = make_candidates(case, device, settings.dtype)
            records.extend(measure_case(case, candidates, device, timer, settings))
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)
            records.append({"case": case.name, "G": case.G, "error": short_error(exc)})
    return records
