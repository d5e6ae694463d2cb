"""The FP8 training targets (issue 4), each with the figure a result JSON of
`python -m bench` measured for it, and whether it is met.

    python -m bench.targets RESULT.json [--store-probe PROBE.json] [--out FILE]

`python -m bench.make_table` renders the same table into BENCHMARKS.md. Each
row covers one target over the cases it names, as the range measured and how
many cases meet it:

- FP8 GEMM throughput: every role, case and routing at >= 0.85 of dense
  per-tensor FP8 cuBLAS (`dense_fp8`, `torch._scaled_mm`) of the same size;
  our promoting kernels (fp32 accumulation, the default) against `dense_fp8`,
  the fast-accumulation ones against `dense_fp8_fast`. Rows per role and per
  expert count (8, and 32-128), since the grouped kernels' memory traffic
  grows with G (`python -m bench.roofline` bounds it).
- End to end: GroupedLinear forward+backward in FP8, quantization included,
  >= 1.5x our bf16 step on the dsv3 and mixtral cases; per recipe.
- Host overhead: the FP8 forward <= 25 us a call and forward+backward <= 60
  us, the same for every G (the spread is max/min over G); torch's own
  autograd floor beside them.
Numerics targets are checked by tests (tests/python/test_numerics.py,
test_fp8_recipes.py, test_fp8_training.py), not by the benchmark.

With `--store-probe PROBE.json` (`python -m bench.store_probe` on the same
GPU model) the table gains a "bound" column: the most any kernel could
reach on that GPU, from `python -m bench.roofline`'s floors. A GEMM ratio
cannot pass dense / max(memory floor, store floor) nor, by definition of
the floor, be bounded below 1 when dense is slower than the floor; a step's
speedup cannot pass the bf16 step over its casts at copy bandwidth plus
each GEMM at max(dense, floor). A target whose bound is below it is out of
reach for any kernel on that GPU. Reads only JSON: runs anywhere.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from . import roofline

GEMM_TARGET = 0.85  # of dense FP8 cuBLAS
SPEEDUP_TARGET = 1.5  # over our bf16 step
HOST_FWD_US = 25.0
HOST_FWD_BWD_US = 60.0

# Ours against the dense yardstick with the same accumulation.
GEMM_PAIRS = (("grouped_linear:fp8", "dense_fp8", "promoting (fp32 accumulation)"),
              ("grouped_linear:fp8_fast", "dense_fp8_fast", "fast accumulation"))
ROLES = ("fwd", "dgrad", "wgrad")
RECIPES = ("fp8_delayed", "fp8_current", "fp8_block", "fp8_delayed_cached_weights")
HOST_IMPLS = ("grouped_linear_fp8_delayed", "grouped_linear_fp8_current",
              "grouped_linear_fp8_delayed_cached_weights")

Row = List[str]


def expert_bucket(groups: int) -> str:
    return "8 experts" if groups <= 8 else "32-128 experts"


def span(values: Sequence[float], digits: int = 2) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.{digits}f}" if round(lo, digits) == round(hi, digits) \
        else f"{lo:.{digits}f}-{hi:.{digits}f}"


def verdict(met: int, total: int) -> str:
    return "met" if met == total else f"not met ({met}/{total})"


def _ratio(record: dict, ours: str, dense: str) -> Optional[float]:
    impls = record.get("impls", {})
    a, b = impls.get(ours, {}), impls.get(dense, {})
    if "median_ms" not in a or "median_ms" not in b or a["median_ms"] <= 0:
        return None
    return b["median_ms"] / a["median_ms"]


def gemm_bound(record: dict, dense: str, bw: Dict[str, float]) -> Optional[float]:
    """The ratio to `dense` no kernel passes on the record's GPU:
    min(1, dense / floor), the floor being the memory floor and, for wgrad,
    the store floor too (bench.roofline); None without the shape or peer."""
    dense_ms = record.get("impls", {}).get(dense, {}).get("median_ms")
    if dense_ms is None or any(k not in record for k in ("G", "K", "N", "T")):
        return None
    f = roofline.gemm_floors_ms(record["role"], record["G"], record["K"], record["N"],
                                record["T"], bw)
    return min(1.0, dense_ms / max(f.values()))


def _bound_cell(bounds: Sequence[float]) -> str:
    return span(bounds) if bounds else "-"


def gemm_rows(records: Iterable[dict], bw: Optional[Dict[str, float]] = None) -> List[Row]:
    """Per kernel kind, role and expert bucket: the ratios to dense, both
    routings together; with `bw` (bench.roofline.bandwidths) also the bound."""
    found: Dict[Tuple[str, str, str], List[float]] = {}
    bounds: Dict[Tuple[str, str, str], List[float]] = {}
    for r in records:
        for ours, dense, kind in GEMM_PAIRS:
            ratio = _ratio(r, ours, dense)
            if ratio is not None and r.get("role") in ROLES:
                key = (kind, r["role"], expert_bucket(int(r["G"])))
                found.setdefault(key, []).append(ratio)
                bound = gemm_bound(r, dense, bw) if bw else None
                if bound is not None:
                    bounds.setdefault(key, []).append(bound)
    rows = []
    for ours, dense, kind in GEMM_PAIRS:
        for role in ROLES:
            for bucket in ("8 experts", "32-128 experts"):
                ratios = found.get((kind, role, bucket))
                if ratios:
                    met = sum(x >= GEMM_TARGET for x in ratios)
                    row = [f"FP8 GEMM {role}, {kind}", bucket,
                           f">= {GEMM_TARGET} of `{dense}`", span(ratios),
                           verdict(met, len(ratios))]
                    if bw:
                        row.append(_bound_cell(bounds.get((kind, role, bucket), [])))
                    rows.append(row)
    return rows


def end_to_end_rows(records: Iterable[dict],
                    bounds: Optional[Dict[Tuple[str, str, str], float]] = None) -> List[Row]:
    """Per recipe and model (the case name's first part): speedups over bf16;
    with `bounds` ((case, routing, step) -> bench.roofline's bound) also the
    bound."""
    found: Dict[Tuple[str, str], List[float]] = {}
    bound_found: Dict[Tuple[str, str], List[float]] = {}
    for r in records:
        model = str(r.get("case", "?")).split("_")[0]
        for recipe in RECIPES:
            entry = r.get("impls", {}).get(recipe, {})
            if "speedup_over_bf16" in entry:
                found.setdefault((recipe, model), []).append(entry["speedup_over_bf16"])
                bound = (bounds or {}).get((r.get("case"), r.get("routing"), recipe))
                if bound is not None:
                    bound_found.setdefault((recipe, model), []).append(bound)
    rows = []
    for recipe in RECIPES:
        for (name, model), speedups in found.items():
            if name == recipe:
                met = sum(x >= SPEEDUP_TARGET for x in speedups)
                row = [f"end to end, {recipe}", model, f">= {SPEEDUP_TARGET}x our bf16",
                       span(speedups) + "x", verdict(met, len(speedups))]
                if bounds is not None:
                    found_bounds = bound_found.get((recipe, model), [])
                    row.append(_bound_cell(found_bounds) + ("x" if found_bounds else ""))
                rows.append(row)
    return rows


def _host_us(records: Iterable[dict], impl: str, mode: str) -> Dict[int, float]:
    out = {}
    for r in records:
        entry = r.get("impls", {}).get(impl, {})
        if r.get("mode") == mode and "host_us" in entry:
            out[int(r["G"])] = entry["host_us"]
    return out


def host_rows(records: Sequence[dict]) -> List[Row]:
    rows = []
    for mode, limit, label in (("fwd_no_grad", HOST_FWD_US, "forward"),
                               ("fwd_bwd", HOST_FWD_BWD_US, "forward+backward")):
        floor = _host_us(records, "autograd_floor", mode)
        for impl in HOST_IMPLS:
            per_g = _host_us(records, impl, mode)
            if not per_g:
                continue
            values = list(per_g.values())
            met = sum(x <= limit for x in values)
            measured = f"{span(values, 1)} us over G = {', '.join(map(str, sorted(per_g)))}; " \
                       f"max/min {max(values) / min(values):.2f}"
            if floor and mode == "fwd_bwd":
                measured += f"; torch's autograd floor {span(list(floor.values()), 1)} us"
            rows.append([f"host, {label}", impl.replace("grouped_linear_", ""),
                         f"<= {limit:.0f} us, same for every G", measured,
                         verdict(met, len(values))])
    return rows


HEADER = ["target", "cases", "criterion", "measured", "verdict"]
BOUND_HEADER = "bound (any kernel, this GPU)"


def target_rows(result: dict, bw: Optional[Dict[str, float]] = None) -> List[Row]:
    """Every target's row; with `bw` (a store probe's bandwidths) each ends
    in its bound ("-" for host time: no bandwidth bounds it)."""
    e2e_bounds = None
    host = host_rows(result.get("host_overhead", []))
    if bw:
        e2e_bounds = {(b["case"], b["routing"], b["step"]): b["bound"]
                      for b in roofline.end_to_end_bounds(result, bw)}
        host = [row + ["-"] for row in host]
    return (gemm_rows(result.get("fp8_throughput", []), bw) +
            end_to_end_rows(result.get("fp8_end_to_end", []), e2e_bounds) + host)


def render(result: dict, bw: Optional[Dict[str, float]] = None) -> str:
    rows = target_rows(result, bw)
    if not rows:
        return ""
    header = HEADER + ([BOUND_HEADER] if bw else [])

    def line(cells) -> str:
        return "| " + " | ".join(cells) + " |"
    return "\n".join([line(header), line(["---"] * len(header))] + [line(r) for r in rows])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.targets", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result", help="a result JSON of `python -m bench`")
    parser.add_argument("--store-probe", help="a `python -m bench.store_probe` JSON of the same "
                        "GPU model: adds each target's bound")
    parser.add_argument("--out", help="write the table here instead of stdout")
    args = parser.parse_args(argv)
    bw = None
    if args.store_probe:
        try:
            bw = roofline.bandwidths(json.loads(Path(args.store_probe).read_text()))
        except (OSError, ValueError, KeyError) as exc:
            print(f"targets: --store-probe {args.store_probe}: {exc}", file=sys.stderr)
            return 2
    text = render(json.loads(Path(args.result).read_text()), bw)
    if not text:
        print(f"{args.result} holds no FP8 throughput, FP8 end-to-end or host-overhead records",
              file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
