"""python -m bench.plot RESULT.json [--out RESULT.png]

A PNG of a benchmark result: per case, routing and role, the ratio to a dense
GEMM of every grouped implementation measured (bf16 throughput, and FP8 where
the run has it), with the issues' targets drawn as lines. `python -m bench`
calls this after writing its JSON; it needs matplotlib, which
`scripts/bench.sh` installs when it can (without it the plot is skipped and
this command draws it later from the JSON, on any machine).
"""

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

# (section key, title, implementations to draw, target ratio)
PANELS = [
    ("throughput", "bf16 grouped GEMMs, ratio to dense torch.matmul",
     ["grouped_linear:sm90_grouped", "grouped_mm", "grouped_linear:cublas"], 0.90),
    ("fp8_throughput", "FP8 grouped GEMMs, ratio to dense torch._scaled_mm",
     ["grouped_linear:fp8", "grouped_linear:fp8_fast", "scaled_grouped_mm"], 0.85),
]


def _bars(rows: Sequence[dict], impls: Sequence[str]) -> Tuple[List[str], List[List[float]]]:
    labels = [f"{r['case']}\n{r['routing'][:4]} {r['role']}" for r in rows]
    values = []
    for impl in impls:
        series = []
        for r in rows:
            entry = r["impls"].get(impl, {})
            ratio = entry.get("ratio_to_dense") if isinstance(entry, dict) else None
            series.append(float(ratio) if ratio is not None else 0.0)
        values.append(series)
    return labels, values


def draw(result: dict, out_path: Path) -> Optional[Path]:
    """Writes the PNG; returns its path, or None (with a message) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench.plot: matplotlib is not installed; no PNG "
              "(pip install matplotlib, then python -m bench.plot RESULT.json)", file=sys.stderr)
        return None
    panels = [(key, title, impls, target) for key, title, impls, target in PANELS
              if result.get(key)]
    if not panels:
        print("bench.plot: the result has no throughput section to draw", file=sys.stderr)
        return None
    width = max(len(result[key]) for key, *_ in panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(12, 0.42 * width), 5.2 * len(panels)),
                             squeeze=False)
    for ax, (key, title, impls, target) in zip(axes[:, 0], panels):
        rows = result[key]
        impls = [i for i in impls if any(i in r["impls"] for r in rows)]
        labels, values = _bars(rows, impls)
        step = 0.8 / max(1, len(impls))
        for k, (impl, series) in enumerate(zip(impls, values)):
            xs = [i + (k - (len(impls) - 1) / 2) * step for i in range(len(rows))]
            ax.bar(xs, series, width=step, label=impl)
        ax.axhline(target, color="black", linestyle="--", linewidth=1,
                   label=f"target {target:.2f}")
        ax.axhline(1.0, color="grey", linewidth=0.6)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(labels, rotation=90, fontsize=6)
        ax.set_ylabel("ratio to dense")
        ax.set_ylim(0, 1.15)
        # A result assembled from runs at several commits (meta "sections_from")
        # names each panel's commit.
        source = result.get("meta", {}).get("sections_from", {}).get(key)
        ax.set_title(title + (f" (commit {source})" if source else ""), fontsize=10)
        ax.legend(fontsize=7, loc="upper left", ncol=len(impls) + 1)
    meta = result.get("meta", {})
    fig.suptitle(f"grouped_linear on {meta.get('device', '?')}, torch {meta.get('torch', '?')}, "
                 f"commit {meta.get('commit', '?')}, {meta.get('date', '')}", fontsize=10)
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.plot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result", help="result JSON of `python -m bench`")
    parser.add_argument("--out", help="PNG path (default: the JSON's path with .png)")
    args = parser.parse_args(argv)
    result_path = Path(args.result)
    result = json.loads(result_path.read_text())
    out = draw(result, Path(args.out) if args.out else result_path.with_suffix(".png"))
    if out is not None:
        print(f"bench.plot: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
