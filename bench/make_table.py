"""BENCHMARKS.md from a result JSON of `python -m bench`.

    python -m bench.make_table RESULT.json > BENCHMARKS.md
    python -m bench.make_table RESULT.json --write BENCHMARKS.md
    python -m bench.make_table              # the newest bench_results/*.json
    python -m bench.make_table RESULT.json --tuning TUNE.json --write BENCHMARKS.md
        (TUNE.json from `python -m bench.tune_sm90`: one more table, every sm90
        kernel on every case)
    python -m bench.make_table RESULT.json --compare LATER.json --write BENCHMARKS.md
        (one more section: LATER's ratios of our kernels beside RESULT's, per
        case, routing and role, and its FP8 end-to-end times beside RESULT's)
    python -m bench.make_table RESULT.json --store-probe PROBE.json ...
        (the FP8 targets tables gain a bound column: `python -m bench.targets`)
    --compare and --store-probe may each be given more than once: one
    re-run section per --compare, and each run's bounds from the probe of
    its own GPU model (the probe's "device" against the run's meta.device).
"""

import argparse
import os
import json
import sys
from pathlib import Path
from typing import List

from .cases import REPO_ROOT
from .report import (MODE_LABELS, RATIO_NOTE, Notes, Table, fmt, host_tables,
                     python_layer_table, throughput_table)
from . import roofline, targets


def render_markdown(table: Table) -> str:
    header, rows, labels = table

    def line(cells) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
    align = ["---" if i < labels else "---:" for i in range(len(header))]
    return "\n".join([line(header), line(align)] + [line(r) for r in rows])


def shapes_table(records) -> Table:
    """One row per case and routing: the shapes and how uneven the groups are."""
    header = ["case", "routing", "G", "K", "N", "T", "rows per group (min-max)", "empty groups"]
    rows, seen = [], set()
    for r in records:
        key = (r.get("case"), r.get("routing"))
        if "splits" not in r or key in seen:
            continue
        seen.add(key)
        s = r["splits"]
        rows.append([r["case"], r["routing"], r["G"], r["K"], r["N"], r["T"],
                     f"{s['min']}-{s['max']}", s["empty_groups"]])
    return header, rows, 2


def end_to_end_table(records, notes: Notes) -> Table:
    ok = [r for r in records if "impls" in r]
    names: List[str] = []
    for r in ok:
        names += [n for n in r["impls"] if n not in names]
    rows = []
    for r in ok:
        row = [r["case"], r["routing"]]
        for n in names:
            e = r["impls"].get(n, {})
            if "median_ms" not in e:
                row.append("n/a " + notes.mark(f"{n} {r['case']}: {e.get('error', 'missing')}"))
            elif n == "bf16":
                row.append(f"{e['median_ms']:.3f}")
            else:
                row.append(f"{e['median_ms']:.3f} ({e.get('speedup_over_bf16', 0):.2f}x)")
        rows.append(row)
    for r in records:
        if "impls" not in r:
            notes.mark(f"fp8 end to end {r.get('case')}: {r.get('error')}")
    return ["case", "routing"] + names, rows, 2


OUTPUT_TYPES_INTRO = (
    "The promoting per-tensor FP8 products (`grouped_linear:fp8` of the FP8 throughput table, "
    "one routing) writing bf16, fp16 or fp32 (`grouped_linear:fp8@fp16`: our kernel into "
    "fp16), each against `torch._scaled_mm` into the same type (`dense_fp8@fp16`). fp32 is "
    "the type of an fp32 `main_grad` (written here, not accumulated into). TFLOP/s; in "
    "brackets the ratio to the dense GEMM of the same output type.")


def targets_intro(bw_source: str) -> str:
    text = ("Each target of the FP8 training issue with the figures of this run "
            "(`python -m bench.targets`): the range over the cases it names and how many "
            "meet it (figures rounded to two decimals, counted unrounded). Numerics are "
            "checked by the tests, not here.")
    if bw_source:
        text += (" The last column is the most any kernel could reach on this GPU "
                 "(`python -m bench.roofline`'s floors, with the write and copy bandwidth "
                 f"of `{bw_source}`): a target above its bound is out of reach here.")
    else:
        text += " `python -m bench.roofline` gives the bound each GEMM ratio can reach."
    return text


def render(result: dict, source: str = "", plot: str = "", bw=None, bw_source: str = "") -> str:
    meta = result.get("meta", {})
    notes = Notes()
    device = meta.get("device", "?")
    out: List[str] = ["# Benchmarks", ""]
    out.append(f"- Date: {meta.get('date', '?')}; commit `{meta.get('commit', 'unknown')}`")
    gpu_bits = f", {meta['gpu_memory_gib']} GiB, sm {meta.get('gpu_capability')}" \
        if "gpu_memory_gib" in meta else ""
    out.append(f"- Device: {device}{gpu_bits}")
    out.append(f"- torch {meta.get('torch', '?')} (CUDA {meta.get('torch_cuda')}), "
               f"python {meta.get('python', '?')}; grouped_linear {meta.get('grouped_linear_version', '?')}, "
               f"engine `{meta.get('engine', '?')}` (measured: "
               f"{', '.join('`%s`' % e for e in meta.get('engines_measured', []))})")
    settings = meta.get("settings", {})
    if settings and result.get("throughput"):
        out.append(f"- Throughput: median of {settings.get('reps')} runs after "
                   f"{settings.get('warmup')} warm-up, timer `{meta.get('timer')}`, "
                   f"dtype {meta.get('dtype')}, no bias")
    if settings and result.get("host_overhead"):
        out.append(f"- Host overhead: {settings.get('host_calls')} calls per batch after "
                   f"{settings.get('host_warmup')} warm-up, median of "
                   f"{settings.get('host_batches')} batches")
    if source:
        out.append(f"- Source: `{source}`")
    out += ["", f"**{RATIO_NOTE}**", ""]
    if meta.get("quick"):
        out += ["> Quick run: fewer repetitions than the protocol asks.", ""]
    if meta.get("note"):
        out += [f"> {meta['note']}", ""]
    if meta.get("commit_note"):
        out += [f"> Commit: {meta['commit_note']}", ""]
    if plot:
        out += [f"![ratios to dense, every role and case]({plot})", ""]

    target_table = targets.render(result, bw)
    if target_table:
        out += ["## FP8 targets (issue 4)", "", targets_intro(bw_source), "", target_table, ""]
    if result.get("throughput"):
        out += ["## Throughput", "",
                "TFLOP/s = 2·T·K·N / median time, per role; in brackets the ratio to dense "
                "(one `torch.matmul` of the same M = T, N, K, same dtype). `grouped_mm` is "
                "`torch.nn.functional.grouped_mm`; `loop` is a Python loop of per-expert "
                "`torch.mm`. Routing as in `bench_cases.json` (skewed: u³ + 0.02 weights, seed 1).",
                "", render_markdown(shapes_table(result["throughput"])), "",
                render_markdown(throughput_table(result["throughput"], notes)), ""]
    if result.get("fp8_throughput"):
        out += ["## FP8 throughput", "",
                "Per-tensor scaled FP8 (E4M3 activations and weights, E5M2 gradients), bf16 "
                "output, operands quantized before timing (`bench/fp8_throughput.py`). In "
                "brackets the ratio to `dense_fp8`: one `torch._scaled_mm` (cuBLAS) of the same "
                "M, N, K. `grouped_linear:fp8` accumulates in fp32 (use_split_accumulator=True), "
                "`grouped_linear:fp8_fast` allows fast accumulation (False: Transformer Engine's "
                "default for the forward; wgrad to bf16 has a fast kernel too, the other roles "
                "fall back to fp32 accumulation) and is compared with `dense_fp8_fast` "
                "(`use_fast_accum=True`). `scaled_grouped_mm` is `torch._scaled_grouped_mm` with "
                "row-wise scales (E4M3 only, not run for wgrad). `grouped_linear:fp8_block` "
                "takes blockwise scales (Float8BlockScaling: E4M3 throughout, 1×128 blocks "
                "for activations and gradients, 128×128 for weights) and is compared with "
                "`dense_fp8_block`, `torch.nn.functional.scaled_mm` (cuBLAS) with the same "
                "scalings (wgrad: 1×128 by 1×128).", "",
                render_markdown(throughput_table(result["fp8_throughput"], notes)), ""]
    if result.get("fp8_output_types"):
        out += ["## FP8 output types", "", OUTPUT_TYPES_INTRO, "",
                render_markdown(throughput_table(result["fp8_output_types"], notes)), ""]
    if result.get("fp8_end_to_end"):
        out += ["## FP8 end to end", "",
                "GroupedLinear forward+backward (bias off), one step: autocast entered, "
                "forward, autocast left (delayed scaling's step update), backward; "
                "quantization included (`bench/fp8_module.py`). ms per step (median); in "
                "brackets the speedup over bf16 in the same process. "
                "`fp8_delayed_cached_weights` (where measured) is a later micro-batch of a "
                "step, reusing the first one's FP8 weights (`is_first_microbatch=False`).", "",
                render_markdown(end_to_end_table(result["fp8_end_to_end"], notes)), ""]
    if result.get("host_overhead"):
        out += ["## Host overhead", "",
                "µs per call: host time to issue the calls without synchronising / GPU time "
                "between events around the same loop. GPU ≈ host means the GPU waited for the "
                "host. 16 rows per expert, K = N = 256; `_dev_splits` passes m_splits as a "
                "device tensor.", ""]
        for table in host_tables(result["host_overhead"], notes):
            out += [render_markdown(table), ""]
    if result.get("python_layer"):
        out += ["## Python layer", "",
                "`GroupedLinear.forward` with the native call replaced by a stub that returns "
                "its input: the module's own per-call Python work, which should not grow with G.",
                "", render_markdown(python_layer_table(result["python_layer"])), ""]
    if notes.items:
        out += ["## Notes", ""] + [f"- {line}" for line in notes.lines()] + [""]
    return "\n".join(out)


def tuning_config(kernel: str) -> str:
    """A kernel's name without its role and input type: the tile
    configuration, with an FP8 kernel's output type and suffixes
    ("wgrad_bf16_coop256x128" -> "coop256x128",
    "wgrad_e5m2_bf16_halfcoop128x256_widestore@along_n" ->
    "bf16_halfcoop128x256_widestore@along_n")."""
    return kernel.split("_", 2)[-1]


def tuning_table(tune: dict) -> Table:
    """Ratio to dense of every sm90 kernel per case, routing and role; the
    best of each row in bold."""
    records = tune.get("records", [])
    configs: List[str] = []
    for r in records:
        for name in r["kernels"]:
            config = tuning_config(name)
            if config not in configs:
                configs.append(config)
    header = ["case", "routing", "role"] + configs
    rows = []
    for r in records:
        by_config = {tuning_config(n): v["ratio_to_dense"] for n, v in r["kernels"].items()}
        best = max(by_config.values()) if by_config else None
        cells = []
        for c in configs:
            value = by_config.get(c)
            text = "-" if value is None else f"{value:.2f}"
            cells.append(f"**{text}**" if value is not None and value == best else text)
        rows.append([r["case"], r["routing"], r["role"]] + cells)
    return header, rows, 3


def render_tuning(tune: dict, source: str) -> str:
    out = ["## sm90 tile configurations", "",
           f"Every kernel of the `sm90_grouped` engine forced in turn "
           f"({tune.get('precision', 'bf16')}, ratio to dense; "
           f"best per row in bold), from `python -m bench.tune_sm90` on {tune.get('device', '?')}, "
           f"torch {tune.get('torch', '?')}. Source: `{source}`."]
    if tune.get("note"):
        out += ["", f"> {tune['note']}"]
    out += ["", render_markdown(tuning_table(tune)), ""]
    return "\n".join(out)


def _key(r):
    return (r.get("case"), r.get("routing"), r.get("role"))


def _ratio(record, impl):
    value = record.get("impls", {}).get(impl, {}).get("ratio_to_dense") if record else None
    return f"{value:.2f}" if value is not None else "-"


def _delta(before, after):
    if "-" in (before, after):
        return "-"
    return f"{float(after) - float(before):+.2f}"


def comparison_table(base_records, later_records) -> Table:
    """Ratio to dense of each of our implementations in both runs, per case,
    routing and role (rows of the later run; peers are not repeated)."""
    base = {_key(r): r for r in base_records if "impls" in r}
    ours: List[str] = []
    for r in later_records:
        ours += [n for n in r.get("impls", {}) if n.startswith("grouped_linear") and n not in ours]
    header = ["case", "routing", "role"]
    for n in ours:
        header += [f"{n} before", "now", "change"]
    rows = []
    for r in later_records:
        if "impls" not in r:
            continue
        row = [r["case"], r["routing"], r["role"]]
        for n in ours:
            before, after = _ratio(base.get(_key(r)), n), _ratio(r, n)
            row += [before, after, _delta(before, after)]
        rows.append(row)
    return header, rows, 3


def end_to_end_comparison(base_records, later_records) -> Table:
    """ms per step in both runs; in brackets the speedup over bf16 of each run."""
    base = {(r["case"], r["routing"]): r for r in base_records if "impls" in r}
    names: List[str] = []
    for r in later_records:
        names += [n for n in r.get("impls", {}) if n not in names]
    rows = []
    for r in later_records:
        if "impls" not in r:
            continue
        then = base.get((r["case"], r["routing"]), {}).get("impls", {})
        row = [r["case"], r["routing"]]
        for n in names:
            cells = []
            for e in (then.get(n, {}), r["impls"].get(n, {})):
                if "median_ms" not in e:
                    cells.append("-")
                elif n == "bf16":
                    cells.append(f"{e['median_ms']:.3f}")
                else:
                    cells.append(f"{e['median_ms']:.3f} ({e.get('speedup_over_bf16', 0):.2f}x)")
            row.append(" → ".join(cells))
        rows.append(row)
    return ["case", "routing"] + names, rows, 2


def host_comparisons(base_records, later_records) -> List[Table]:
    """µs of host time per call in both runs (before → now), one table per set
    of implementations of the later run (as host_tables), the Python loop peer
    left out: bf16 and torch's autograd floor show how fast each host was."""
    base = {(r["case"], r["mode"]): r for r in base_records if "impls" in r}
    groups = {}
    for r in later_records:
        if "impls" in r:
            names = tuple(n for n in r["impls"] if n != "loop_F.linear")
            groups.setdefault(names, []).append(r)
    tables = []
    for names, group in groups.items():
        rows = []
        for r in group:
            then = base.get((r["case"], r["mode"]), {}).get("impls", {})
            row = [r["case"], str(r["G"]), MODE_LABELS.get(r["mode"], r["mode"])]
            for n in names:
                cells = [fmt(e["host_us"]) if "host_us" in e else "-"
                         for e in (then.get(n, {}), r["impls"].get(n, {}))]
                row.append(" → ".join(cells))
            rows.append(row)
        tables.append((["case", "G", "mode"] + list(names), rows, 3))
    return tables


def host_ab_table(ab: dict) -> Table:
    """bench.host_ab: µs per call of two builds, alternating processes."""
    labels = list(ab.get("builds", {}))
    rows = []
    for r in ab["records"]:
        row = [r["case"], MODE_LABELS.get(r["mode"], r["mode"]), r["impl"]]
        row += [fmt(r["host_us"].get(label)) for label in labels]
        row.append(f"{r['ratio']:.2f}" if r.get("ratio") is not None else "-")
        rows.append(row)
    return ["case", "mode", "implementation"] + labels + [f"{labels[-1]} / {labels[0]}"], rows, 3


def render_host_ab(ab: dict, source: str) -> str:
    return "\n".join([
        "### Host overhead of two builds, alternating processes", "",
        f"`python -m bench.host_ab`, {ab.get('rounds')} rounds, each a median of "
        f"{ab.get('batches')} batches of {ab.get('calls')} calls; per build the median over "
        f"rounds; source `{source}`. Builds: "
        + "; ".join(f"{label}: {what}" for label, what in ab.get("builds", {}).items()) + ".", "",
        render_markdown(host_ab_table(ab))]) + "\n"


def render_comparison(base: dict, later: dict, source: str, bw=None, bw_source: str = "") -> str:
    meta = later.get("meta", {})
    out = [f"## Re-run at `{meta.get('commit', '?')}`", "",
           f"{meta.get('date', '?')}, {meta.get('device', '?')}, torch {meta.get('torch', '?')}; "
           f"source `{source}`. Ratio to dense of our kernels in the run above (before) and in "
           f"this one (now), each against the dense reference of its own process."]
    if meta.get("commit_note"):
        out += ["", f"> {meta['commit_note']}"]
    target_table = targets.render(later, bw)
    if target_table:
        out += ["", "### FP8 targets at this run", "", targets_intro(bw_source), "",
                target_table]
    for section, title in (("throughput", "Throughput"), ("fp8_throughput", "FP8 throughput")):
        if later.get(section):
            out += ["", f"### {title}", "",
                    render_markdown(comparison_table(base.get(section, []), later[section]))]
    if later.get("fp8_output_types"):
        notes = Notes()
        out += ["", "### FP8 output types", "", OUTPUT_TYPES_INTRO, "",
                render_markdown(throughput_table(later["fp8_output_types"], notes))]
        out += [""] + [f"- {line}" for line in notes.lines()] if notes.items else []
    if later.get("fp8_end_to_end"):
        out += ["", "### FP8 end to end (ms per step, before → now)", "",
                render_markdown(end_to_end_comparison(base.get("fp8_end_to_end", []),
                                                      later["fp8_end_to_end"]))]
    if later.get("host_overhead"):
        out += ["", "### Host overhead (µs per call, before → now)"]
        for table in host_comparisons(base.get("host_overhead", []), later["host_overhead"]):
            out += ["", render_markdown(table)]
    return "\n".join(out) + "\n"


def newest_result() -> Path:
    found = sorted((REPO_ROOT / "bench_results").glob("*.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit("no result JSON given and none in bench_results/")
    return found[-1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.make_table", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result", nargs="?", help="result JSON (default: newest in bench_results/)")
    parser.add_argument("--write", help="write the Markdown here instead of stdout")
    parser.add_argument("--tuning", help="a `python -m bench.tune_sm90` JSON to add as a table")
    parser.add_argument("--append", help="a Markdown file (hand-written reading of the "
                        "figures) to add at the end")
    parser.add_argument("--compare", action="append", default=[],
                        help="a later result JSON: its ratios beside this one's (repeatable)")
    parser.add_argument("--host-ab", help="a `python -m bench.host_ab` JSON to add as a table")
    parser.add_argument("--store-probe", action="append", default=[],
                        help="a `python -m bench.store_probe` JSON: the targets tables of runs "
                        "on its GPU model gain each target's bound (repeatable)")
    args = parser.parse_args(argv)
    probes = []  # (GPU model or "", bandwidths, file name)
    for probe_path in args.store_probe:
        try:
            probe = json.loads(Path(probe_path).read_text())
            probes.append((probe.get("device", ""), roofline.bandwidths(probe),
                           Path(probe_path).name))
        except (OSError, ValueError, KeyError) as exc:
            print(f"make_table: --store-probe {probe_path}: {exc}", file=sys.stderr)
            return 2

    def probe_for(run: dict):
        """The bandwidths and source of the first probe of the run's GPU model
        (a probe or run that names none matches any)."""
        device = run.get("meta", {}).get("device", "")
        for probe_device, bw, name in probes:
            if not probe_device or not device or probe_device == device:
                return bw, name
        return None, ""
    path = Path(args.result) if args.result else newest_result()
    # The plot `python -m bench` draws beside its JSON, linked relative to
    # the Markdown file when there is one.
    png = path.with_suffix(".png")
    plot = ""
    if png.exists():
        base = Path(args.write).resolve().parent if args.write else Path.cwd()
        plot = os.path.relpath(png.resolve(), base)
    result = json.loads(path.read_text())
    laters = []
    for compare in args.compare:
        try:
            laters.append((json.loads(Path(compare).read_text()), Path(compare).name))
        except (OSError, ValueError) as exc:
            print(f"make_table: --compare {compare}: {exc}", file=sys.stderr)
            return 2
    bw, bw_source = probe_for(result)
    text = render(result, source=path.name, plot=plot, bw=bw, bw_source=bw_source)
    for later, later_source in laters:
        bw, bw_source = probe_for(later)
        text += "\n" + render_comparison(result, later, later_source, bw, bw_source)
    if args.host_ab:
        ab_path = Path(args.host_ab)
        text += "\n" + render_host_ab(json.loads(ab_path.read_text()), ab_path.name)
    if args.tuning:
        tune_path = Path(args.tuning)
        text += "\n" + render_tuning(json.loads(tune_path.read_text()), tune_path.name)
    if args.append:
        text += "\n" + Path(args.append).read_text()
    if args.write:
        Path(args.write).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
