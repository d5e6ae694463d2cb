"""Where a call's host time goes: runtime calls, allocations, the rest.

    python -m bench.host_profile [--cases tiny_G32] [--impls grouped_linear,grouped_linear_fp8_delayed]
                                 [--modes fwd_no_grad,fwd_grad,fwd_bwd] [--calls 200] [--out PATH]

The host-overhead section's calls (bench/host_overhead.py), run under
torch.profiler's CPU and CUDA activities: per call, how many of each host
event (CUDA runtime and driver calls, aten ops) ran and their summed host
time. The profiler adds its own cost to every event it records, so the
absolute figures are above `python -m bench --sections host`'s; the counts
and the split between kinds of work are what this is for. Beside them the
same loop timed without the profiler. A diagnostic beside `python -m bench`,
not one of its sections; on a GPU only.
"""

import argparse
import sys
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from . import host_overhead
from .cases import csv_list, load_cases
from .report import write_diagnostic

# Host events that are children of others (a launch inside an aten op) are
# counted once, under their own name: self time, not total time.
RUNTIME_PREFIXES = ("cuda", "cu")


def host_events_per_call(prof, calls: int) -> dict:
    totals = defaultdict(lambda: [0, 0.0])
    for event in prof.key_averages():
        if event.device_type != torch.autograd.DeviceType.CPU:
            continue
        entry = totals[event.key]
        entry[0] += event.count
        entry[1] += event.self_cpu_time_total
    rows = {name: {"count": c / calls, "self_us": t / calls} for name, (c, t) in totals.items()}
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]["self_us"]))


def time_loop(fn, calls: int) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def profile_one(case, candidate, mode: str, fn, grad_mode, calls: int) -> dict:
    with candidate.region(), grad_mode:
        plain_us = min(time_loop(fn, calls) for _ in range(3))
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            profiled_us = (time.perf_counter() - start) / calls * 1e6
            torch.cuda.synchronize()
    events = host_events_per_call(prof, calls)
    runtime = {k: v for k, v in events.items() if k.startswith(RUNTIME_PREFIXES)}
    aten = {k: v for k, v in events.items() if k.startswith("aten::")}
    return {"case": case.name, "G": case.G, "impl": candidate.name, "mode": mode,
            "host_us": plain_us, "profiled_host_us": profiled_us,
            "runtime_calls": sum(v["count"] for v in runtime.values()),
            "runtime_us": sum(v["self_us"] for v in runtime.values()),
            "aten_ops": sum(v["count"] for v in aten.values()),
            "aten_us": sum(v["self_us"] for v in aten.values()),
            "events": events}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="tiny_G32")
    parser.add_argument("--impls", default="grouped_linear,grouped_linear_fp8_delayed,"
                                           "grouped_linear_fp8_delayed_cached_weights")
    parser.add_argument("--modes", default=",".join(host_overhead.MODES))
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", help="JSON of every event's per-call figures")
    args = parser.parse_args(argv)
    host_cases = {c.name: c for c in load_cases().host}
    cases = [host_cases[name] for name in csv_list(args.cases, tuple(host_cases), "--cases")]
    modes = csv_list(args.modes, host_overhead.MODES, "--modes")
    if not torch.cuda.is_available():
        raise SystemExit("bench.host_profile: needs a GPU")
    device = torch.device("cuda", torch.cuda.current_device())
    records = []
    for case, candidate, mode, fn, grad_mode in host_overhead.asked_calls(cases, args.impls, modes,
                                                                         device):
        r = profile_one(case, candidate, mode, fn, grad_mode, args.calls)
        records.append(r)
        print(f"{case.name} {candidate.name} {mode}: {r['host_us']:.1f} us/call "
              f"(profiled {r['profiled_host_us']:.1f}); runtime calls "
              f"{r['runtime_calls']:.1f} ({r['runtime_us']:.1f} us), aten ops "
              f"{r['aten_ops']:.1f} ({r['aten_us']:.1f} us)")
        for event, v in list(r["events"].items())[:14]:
            print(f"    {v['count']:5.1f} x {event:48s} {v['self_us']:7.2f} us")
        sys.stdout.flush()
    if args.out:
        write_diagnostic(args.out, records, calls=args.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
