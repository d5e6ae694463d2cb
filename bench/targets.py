"""The FP8 training targets (issue 4), each with the figure a result JSON of
`python -m bench` measured for it, and whether it is met.

    python -m bench.targets RESULT.json [--out FILE]

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
test_fp8_recipes.py, test_fp8_training.py), not by the benchmark. Reads
only JSON: runs anywhere.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

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


def gemm_rows(records: Iterable[dict]) -> List[Row]:
    """Per kernel kind, role and expert bucket: the ratios to dense, both
    routings together."""
    found: Dict[Tuple[str, str, str], List[float]] = {}
    for r in records:
        for ours, dense, kind in GEMM_PAIRS:
            ratio = _ratio(r, ours, dense)
            if ratio is not None and r.get("role") in ROLES:
                found.setdefault((kind, r["role"], expert_bucket(int(r["G"]))), []).append(ratio)
    rows = []
    for ours, dense, kind in GEMM_PAIRS:
        for role in ROLES:
            for bucket in ("8 experts", "32-128 experts"):
                ratios = found.get((kind, role, bucket))
                if ratios:
                    met = sum(x >= GEMM_TARGET for x in ratios)
                    rows.append([f"FP8 GEMM {role}, {kind}", bucket,
                                 f">= {GEMM_TARGET} of `{dense}`", span(ratios),
                                 verdict(met, len(ratios))])
    return rows


def end_to_end_rows(records: Iterable[dict]) -> List[Row]:
    """Per recipe and model (the case name's first part): speedups over bf16."""
    found: Dict[Tuple[str, str], List[float]] = {}
    for r in records:
        model = str(r.get("case", "?")).split("_")[0]
        for recipe in RECIPES:
            entry = r.get("impls", {}).get(recipe, {})
            if "speedup_over_bf16" in entry:
                found.setdefault((recipe, model), []).append(entry["speedup_over_bf16"])
    rows = []
    for recipe in RECIPES:
        for (name, model), speedups in found.items():
            if name == recipe:
                met = sum(x >= SPEEDUP_TARGET for x in speedups)
                rows.append([f"end to end, {recipe}", model,
                             f">= {SPEEDUP_TARGET}x our bf16", span(speedups) + "x",
                             verdict(met, len(speedups))])
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


def target_rows(result: dict) -> List[Row]:
    return (gemm_rows(result.get("fp8_throughput", [])) +
            end_to_end_rows(result.get("fp8_end_to_end", [])) +
            host_rows(result.get("host_overhead", [])))


def render(result: dict) -> str:
    rows = target_rows(result)
    if not rows:
        return ""

    def line(cells) -> str:
        return "| " + " | ".join(cells) + " |"
    return "\n".join([line(HEADER), line(["---"] * len(HEADER))] + [line(r) for r in rows])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.targets", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result", help="a result JSON of `python -m bench`")
    parser.add_argument("--out", help="write the table here instead of stdout")
    args = parser.parse_args(argv)
    text = render(json.loads(Path(args.result).read_text()))
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
