"""Results out: the JSON file, progress lines, and the tables (rows built once,
rendered as aligned text here and as Markdown by make_table.py)."""

import json
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

# header, rows, and how many leading columns are labels (the rest are numbers,
# right-aligned).
Table = Tuple[List[str], List[List[str]], int]

RATIO_NOTE = ("Ratios to dense (one GEMM of the same M = T, N, K, dtype, same process) are "
              "the figures that travel between machines; absolute TFLOP/s and µs do not.")


def log(message: str) -> None:
    """Progress goes to stderr, so stdout ends with the summary tables."""
    print(message, file=sys.stderr, flush=True)


def short_error(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def each_case(cases, timer, heading, measure) -> List[dict]:
    """measure(case)'s records for each case in turn, after logging
    heading(case). A case that raises (out of memory, say) becomes an error
    record and the rest still run; on a GPU each case starts from an empty
    cache (the largest weights are 1.9 GB)."""
    import traceback

    import torch
    records: List[dict] = []
    for case in cases:
        log(heading(case))
        try:
            records.extend(measure(case))
        except Exception as exc:  # noqa: BLE001  a failed case is a result, not a crash
            traceback.print_exc(file=sys.stderr)
            records.append({"case": case.name, "G": case.G, "K": case.K, "N": case.N,
                            "T": case.T, "error": short_error(exc)})
        timer.synchronize()
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    return records


def write_json(result: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")


def write_diagnostic(path: str, records: list, **fields) -> None:
    """A diagnostic's JSON (bench.tune_sm90, store_probe, step_profile): the
    GPU, torch, the package's build commit (unless the fields name it: a
    diagnostic of several builds), its own fields, then its records."""
    import torch

    if "package_build_commit" not in fields:
        import grouped_linear
        fields = {"package_build_commit": grouped_linear.build_info.get("commit", "unknown"),
                  **fields}
    write_json({"device": torch.cuda.get_device_name(), "torch": torch.__version__, **fields,
                "records": records}, Path(path))


def fmt(value: Optional[float]) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def impl_order(records: Iterable[dict]) -> List[str]:
    seen: List[str] = []
    for record in records:
        for name in record.get("impls", {}):
            if name not in seen:
                seen.append(name)
    # grouped_linear engines first, dense last: the yardstick closes the row.
    return sorted(seen, key=lambda n: (0 if n.startswith("grouped_linear") else
                                       2 if n == "dense" else 1, seen.index(n)))


class Notes:
    """Errors and failed checks, numbered once and listed under a table."""

    def __init__(self):
        self.items: List[str] = []

    def mark(self, text: str) -> str:
        if text not in self.items:
            self.items.append(text)
        return f"[{self.items.index(text) + 1}]"

    def lines(self) -> List[str]:
        return [f"[{i + 1}] {text}" for i, text in enumerate(self.items)]


def throughput_table(records: Sequence[dict], notes: Notes) -> Table:
    ok = [r for r in records if "impls" in r]
    names = impl_order(ok)
    header = ["case", "routing", "role"] + names
    rows = []
    for r in ok:
        row = [r["case"], r["routing"], r["role"]]
        for name in names:
            entry = r["impls"].get(name)
            if entry is None:
                row.append("-")
            elif "error" in entry:
                row.append("n/a " + notes.mark(f"{name}: {entry['error']}"))
            else:
                cell = fmt(entry["tflops"])
                if not name.startswith("dense") and "ratio_to_dense" in entry:
                    cell += f" ({entry['ratio_to_dense']:.2f})"
                if str(entry.get("check", "")).startswith("mismatch"):
                    cell += " " + notes.mark(f"{name} {r['case']} {r['routing']} {r['role']}: "
                                             f"{entry['check']}")
                row.append(cell)
        rows.append(row)
    for r in records:
        if "impls" not in r:
            rows.append([r.get("case", "?"), "-", "-"] + ["-"] * len(names))
            rows[-1][1] = "error " + notes.mark(f"{r.get('case')}: {r.get('error')}")
    return header, rows, 3


MODE_LABELS = {"fwd_no_grad": "fwd (no_grad)", "fwd_grad": "fwd (grad on)",
               "fwd_bwd": "fwd+bwd"}


def host_tables(records: Sequence[dict], notes: Notes) -> List[Table]:
    """One table per set of implementations (the grouped cases, then Linear)."""
    groups: Dict[Tuple[str, ...], List[dict]] = {}
    for r in records:
        if "impls" in r:
            groups.setdefault(tuple(r["impls"]), []).append(r)
        else:
            notes.mark(f"host overhead {r.get('case')}: {r.get('error')}")
    tables = []
    for names, group in groups.items():
        header = ["case", "G", "mode"] + list(names)
        rows = []
        for r in group:
            row = [r["case"], str(r["G"]), MODE_LABELS.get(r["mode"], r["mode"])]
            for name in names:
                entry = r["impls"][name]
                if "error" in entry:
                    row.append("n/a " + notes.mark(f"{name}: {entry['error']}"))
                else:
                    row.append(f"{fmt(entry['host_us'])} / {fmt(entry.get('gpu_us'))}")
            rows.append(row)
        tables.append((header, rows, 3))
    return tables


def python_layer_table(records: Sequence[dict]) -> Table:
    header = ["Python layer (native call stubbed)", "G", "us/call"]
    rows = [[r["what"], "-" if r["G"] is None else str(r["G"]), f"{r['us_per_call']:.2f}"]
            for r in records]
    return header, rows, 1


def render_text(table: Table) -> str:
    header, rows, labels = table
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)] if rows else \
        [len(h) for h in header]
    def line(cells):
        return "  ".join(str(c).ljust(w) if i < labels else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def heading_lines(meta: dict) -> List[str]:
    lines = [f"grouped_linear benchmark  {meta.get('date')}  commit {meta.get('commit')}",
             f"device: {meta.get('device')}  torch {meta.get('torch')}  "
             f"engine: {meta.get('engine')}  python {meta.get('python')}"]
    if meta.get("quick"):
        lines.append("QUICK RUN: fewer repetitions than the protocol asks; for smoke tests only.")
    if meta.get("note"):
        lines.append("NOTE: " + str(meta["note"]))
    return lines


def print_summary(result: dict, out=sys.stdout) -> None:
    meta = result["meta"]
    notes = Notes()
    parts = ["", "\n".join(heading_lines(meta))]
    if result.get("throughput"):
        parts.append(f"Throughput, {meta.get('dtype', 'bf16')}: TFLOP/s = 2*T*K*N / median time "
                     "(in brackets: ratio to dense)\n"
                     + render_text(throughput_table(result["throughput"], notes)))
    if result.get("host_overhead"):
        tables = host_tables(result["host_overhead"], notes)
        parts.append("Host overhead, us per call: host issue time / GPU time "
                     "(GPU ~ host: the GPU waited for the host)\n"
                     + "\n\n".join(render_text(t) for t in tables))
    if result.get("python_layer"):
        parts.append(render_text(python_layer_table(result["python_layer"])))
    if notes.items:
        parts.append("Notes:\n" + "\n".join(notes.lines()))
    parts.append(RATIO_NOTE)
    if result.get("path"):
        parts.append(f"JSON: {result['path']}")
    print("\n\n".join(parts), file=out, flush=True)
