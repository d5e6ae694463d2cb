"""Host overhead of two builds of grouped_linear, measured in alternating processes.

    python -m bench.host_ab --builds before=DIR_A,after=DIR_B [--rounds 5] [--batches 7]
                            [--cases tiny_G8,tiny_G32,tiny_G128] [--impls ...] [--out PATH]

Each DIR holds a `grouped_linear` package (an installed one copied aside, or
an unpacked wheel); it goes first on PYTHONPATH of a child process that runs
the host-overhead section's calls (bench/host_overhead.py) for the chosen
candidates and modes. Rounds alternate the builds, so a drift of the
machine's host speed hits both alike; per build, each figure is the median
over rounds of a round's median over batches. Host time varies from process
to process by tens of percent on a shared machine, which one process per
build (as in two `python -m bench` runs) cannot tell from a change. A
diagnostic beside `python -m bench`; on a GPU only.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

DEFAULT_IMPLS = ("grouped_linear,grouped_linear_fp8_delayed,grouped_linear_fp8_current,"
                 "grouped_linear_fp8_delayed_cached_weights,autograd_floor")


def child(args) -> int:
    import torch

    import grouped_linear

    from . import host_overhead
    from .cases import csv_list, load_cases
    from .timing import make_timer

    device = torch.device("cuda", torch.cuda.current_device())
    timer = make_timer(device)
    settings = host_overhead.Settings(warmup=20, calls=args.calls, batches=args.batches)
    host_cases = {c.name: c for c in load_cases().host}
    wanted = csv_list(args.impls)
    out = {"package": os.path.dirname(grouped_linear.__file__),
           "build_commit": grouped_linear.build_info.get("commit", "unknown"), "records": []}
    for name in csv_list(args.cases, tuple(host_cases), "--cases"):
        case = host_cases[name]
        candidates = [c for c in host_overhead.grouped_candidates(case, device, torch.bfloat16)
                      if c.name in wanted]
        out["records"] += host_overhead.measure_case(case, candidates, device, timer, settings)
    print(json.dumps(out))
    return 0


def run_child(build_dir: str, args) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([build_dir, str(Path(__file__).resolve().parents[1])])
    cmd = [sys.executable, "-m", "bench.host_ab", "--child", "--cases", args.cases, "--impls",
           args.impls, "--calls", str(args.calls), "--batches", str(args.batches)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench.host_ab: child for {build_dir} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", help="label=dir,label=dir")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--cases", default="tiny_G8,tiny_G32,tiny_G128")
    parser.add_argument("--impls", default=DEFAULT_IMPLS)
    parser.add_argument("--out")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    if not args.builds:
        raise SystemExit("--builds: expected label=dir,label=dir")
    builds = [item.split("=", 1) for item in args.builds.split(",")]
    if len(builds) != 2 or any(len(b) != 2 for b in builds):
        raise SystemExit(f"--builds: got {args.builds!r}; expected label=dir,label=dir")
    for label, directory in builds:
        if not (Path(directory) / "grouped_linear" / "__init__.py").is_file():
            raise SystemExit(f"--builds: {label}={directory} holds no grouped_linear package")
    # (case, mode, impl) -> label -> per-round host µs
    figures = {}
    commits = {}
    for r in range(args.rounds):
        for label, directory in builds:
            result = run_child(directory, args)
            commits[label] = result.get("build_commit", "unknown")
            for record in result["records"]:
                for impl, m in record["impls"].items():
                    if "host_us" in m:
                        key = (record["case"], record["mode"], impl)
                        figures.setdefault(key, {}).setdefault(label, []).append(m["host_us"])
            print(f"round {r + 1}/{args.rounds}: {label} done", file=sys.stderr, flush=True)
    labels = [label for label, _ in builds]
    rows = []
    print(f"{'case':10s} {'mode':12s} {'impl':44s} " +
          " ".join(f"{label:>10s}" for label in labels) + "   ratio (per-round medians)")
    for (case, mode, impl), per_label in figures.items():
        med = {label: statistics.median(per_label[label]) for label in labels if label in per_label}
        ratio = med[labels[1]] / med[labels[0]] if len(med) == 2 and med[labels[0]] > 0 else None
        rows.append({"case": case, "mode": mode, "impl": impl, "host_us": med,
                     "rounds": per_label, "ratio": ratio})
        print(f"{case:10s} {mode:12s} {impl:44s} " +
              " ".join(f"{med.get(label, float('nan')):10.1f}" for label in labels) +
              (f"   {ratio:.2f}" if ratio is not None else ""))
    if args.out:
        from .report import write_diagnostic
        # The parent imports neither build: each child named its own commit.
        write_diagnostic(args.out, rows, package_build_commit=commits, builds=dict(builds),
                         rounds=args.rounds, batches=args.batches, calls=args.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
