"""GEMM throughput per case, routing and role: grouped_linear against its peers.

TFLOP/s = 2·T·K·N / median time. Dense is measured once per case and role
(it does not depend on routing) and every figure is also given as a ratio to
it: the ratio is what travels between machines.
"""

import statistics
import sys
import traceback
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import torch

import grouped_linear
from grouped_linear import ops

from . import peers
from .cases import ThroughputCase, make_splits, splits_summary
from .report import each_case, log, short_error

# Relative Frobenius error allowed between two bf16 results of one product
# (different summation orders round differently; a wrong group is far above).
CHECK_TOLERANCE = 2e-2

# Small random inputs: never zeros (they can run faster and hide bugs), and a
# scale that keeps bf16 sums far from overflow for K up to 14336.
X_SCALE, W_SCALE, DY_SCALE = 1.0, 0.02, 0.01


@dataclass
class Settings:
    warmup: int
    reps: int
    roles: Sequence[str]
    routings: Sequence[str]
    engines: Sequence[str]          # grouped_linear engines to measure, default first
    dtype: torch.dtype = torch.bfloat16


def impl_name(engine: str) -> str:
    return f"grouped_linear:{engine}"


def grouped_linear_product(role: str, engine: str, x, w, dy, splits) -> Callable[[], torch.Tensor]:
    """One call into C++ per product: no per-expert Python here."""
    if role == "fwd":
        return lambda: ops.forward(x, w, None, splits, engine=engine)
    if role == "dgrad":
        return lambda: ops.dgrad(dy, w, splits, engine=engine)
    if role == "wgrad":
        return lambda: ops.wgrad(dy, x, splits, engine=engine)[0]
    raise ValueError(role)


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """‖got − ref‖ / ‖ref‖ in float32, a slice at a time (outputs reach 2 GB)."""
    got, ref = got.reshape(-1), ref.reshape(-1)
    if got.numel() != ref.numel():
        return float("inf")
    diff_sq, ref_sq, step = 0.0, 0.0, 1 << 26
    for lo in range(0, ref.numel(), step):
        g = got[lo:lo + step].float()
        r = ref[lo:lo + step].float()
        diff_sq += float(torch.sum((g - r) ** 2))
        ref_sq += float(torch.sum(r ** 2))
    return (diff_sq ** 0.5) / max(ref_sq ** 0.5, 1e-30)


def check_against(got: torch.Tensor, ref: Optional[torch.Tensor]) -> str:
    if ref is None:
        return "no reference"
    err = relative_error(got, ref)
    if not err == err:  # NaN
        return "mismatch (NaN)"
    return f"ok (rel {err:.1e})" if err <= CHECK_TOLERANCE else f"mismatch (rel {err:.1e})"


def time_product(timer, fn, settings: Settings, flops: int) -> Dict[str, float]:
    times = timer.per_run_seconds(fn, settings.warmup, settings.reps)
    med = statistics.median(times)
    return {"median_ms": med * 1e3, "min_ms": min(times) * 1e3, "reps": len(times),
            "tflops": flops / med / 1e12}


def measure_case(case: ThroughputCase, device: torch.device, timer,
                 settings: Settings) -> List[dict]:
    """Every routing and role of one case; returns one record per (routing, role)."""
    dtype = settings.dtype
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(case.T, case.K, dtype=dtype, device=device, generator=gen) * X_SCALE
    w = torch.randn(case.G, case.N, case.K, dtype=dtype, device=device, generator=gen) * W_SCALE
    dy = torch.randn(case.T, case.N, dtype=dtype, device=device, generator=gen) * DY_SCALE
    flops = case.flops()

    dense: Dict[str, dict] = {}
    for role in settings.roles:
        try:
            dense[role] = time_product(timer, peers.dense_product(role, x, w, dy), settings, flops)
        except Exception as exc:  # noqa: BLE001  a failed peer is a result, not a crash
            dense[role] = {"error": short_error(exc)}

    records = []
    for routing in settings.routings:
        splits = make_splits(routing, case.G, case.T)
        offs = peers.group_ends(splits, device)
        for role in settings.roles:
            record = {"case": case.name, "G": case.G, "K": case.K, "N": case.N, "T": case.T,
                      "routing": routing, "splits": splits_summary(splits), "role": role,
                      "flops": flops, "dtype": str(dtype).replace("torch.", ""), "impls": {}}
            record["impls"] = measure_role(role, x, w, dy, splits, offs, timer, settings, flops)
            record["impls"]["dense"] = dict(dense[role])
            add_ratios(record["impls"])
            records.append(record)
            log(f"  {case.name:16s} {routing:8s} {role:6s} " + "  ".join(
                f"{name}={r['tflops']:.3g}" if "tflops" in r else f"{name}=n/a"
                for name, r in record["impls"].items()))
    del x, w, dy
    return records


def measure_role(role, x, w, dy, splits, offs, timer, settings: Settings,
                 flops: int) -> Dict[str, dict]:
    results: Dict[str, dict] = {}
    # The default engine's output is the reference the others are checked against.
    reference: Optional[torch.Tensor] = None
    candidates = [(impl_name(e), "grouped_linear",
                   lambda e=e: grouped_linear_product(role, e, x, w, dy, splits))
                  for e in settings.engines]
    candidates += [
        ("grouped_mm", "peer", lambda: peers.grouped_mm_product(role, x, w, dy, offs)),
        ("loop", "peer", lambda: peers.loop_product(role, x, w, dy, splits)),
    ]
    for name, kind, build in candidates:
        entry: Dict[str, object] = {}
        try:
            fn = build()
            out = fn()
            timer.synchronize()
            if reference is None and kind == "grouped_linear":
                reference = out
                entry["check"] = "reference"
            else:
                entry["check"] = check_against(out, reference)
            del out
            entry.update(time_product(timer, fn, settings, flops))
        except Exception as exc:  # noqa: BLE001
            prefix = "unsupported" if kind == "peer" else "error"
            entry["error"] = f"{prefix}: {short_error(exc)}"
            if kind != "peer":
                traceback.print_exc(file=sys.stderr)
        results[name] = entry
    return results


def add_ratios(impls: Dict[str, dict]) -> None:
    dense_tflops = impls.get("dense", {}).get("tflops")
    for entry in impls.values():
        if dense_tflops and "tflops" in entry:
            entry["ratio_to_dense"] = entry["tflops"] / dense_tflops


def run(cases: Sequence[ThroughputCase], device: torch.device, timer,
        settings: Settings) -> List[dict]:
    return each_case(cases, timer,
                     lambda c: f"throughput {c.name}: G={c.G} K={c.K} N={c.N} T={c.T}",
                     lambda c: measure_case(c, device, timer, settings))


def default_engines(device: torch.device) -> List[str]:
    """Every engine built for this device type, the default one first."""
    default = grouped_linear.engine_for(device)
    names = [default]
    try:
        names += [n for n in ops.engine_names(device.type) if n != default]
    except Exception:  # noqa: BLE001
        pass
    return names
