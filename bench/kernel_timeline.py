"""Where a tiny call's GPU time goes: each kernel's time and the device's gaps between them.

    python -m bench.kernel_timeline [--cases tiny_G8,tiny_G128]
                                    [--impls grouped_linear,grouped_linear_fp8_delayed]
                                    [--modes fwd_no_grad,fwd_bwd] [--calls 50] [--out PATH]

The host-overhead section's calls (bench/host_overhead.py), queued behind a
sleeping kernel so that the GPU, not the host, sets the pace (as
`python -m bench.host_pieces` times them), run under torch.profiler's CUDA
activity. Per call: its GPU pace (events around the queued calls), and for
each kernel or copy in launch order its mean time and the mean idle gap
before it (the previous one's end to its start). Where the GPU's pace
exceeds the host's, the host table measures these kernels and gaps; the
gaps are what launching dependents early (programmatic dependent launch)
could hide. A diagnostic beside `python -m bench`; on a GPU only.
"""

import argparse
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from . import host_overhead
from .cases import csv_list, load_cases
from .report import write_diagnostic

SLEEP_KERNEL = "spin"  # torch.cuda._sleep's kernel: spin_kernel


def device_events(prof):
    """(name, start µs, end µs) of the kernels, copies and fills on the GPU, in
    start order, the sleep left out."""
    events = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
              if e.device_type == torch.autograd.DeviceType.CUDA and SLEEP_KERNEL not in e.name]
    return sorted(events, key=lambda e: e[1])


def per_call_steps(events, calls: int):
    """The calls' device events as one call's steps: each position's name,
    mean time and mean idle gap before it (the first call's first step has
    no gap: the sleep ended before it). None if the calls did not all run the
    same number of events."""
    if not events or len(events) % calls:
        return None
    per_call = len(events) // calls
    steps = []
    for i in range(per_call):
        times = [end - start for _, start, end in events[i::per_call]]
        gaps = [max(0.0, events[j][1] - events[j - 1][2])
                for j in range(i, len(events), per_call) if j > 0]
        steps.append({"name": events[i][0], "us": statistics.mean(times),
                      "gap_before_us": statistics.mean(gaps) if gaps else 0.0})
    return steps


def timeline(fn, calls: int) -> dict:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(400_000_000)  # cycles: longer than queueing the calls
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
    pace = start.elapsed_time(end) * 1e3 / calls
    events = device_events(prof)
    steps = per_call_steps(events, calls)
    if steps is None:
        return {"pace_us": pace, "device_events": len(events),
                "error": "the calls did not all run the same number of kernels"}
    return {"pace_us": pace, "kernels_per_call": len(steps),
            "kernel_us": sum(s["us"] for s in steps),
            "gap_us": sum(s["gap_before_us"] for s in steps), "steps": steps}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="tiny_G8,tiny_G128")
    parser.add_argument("--impls", default="grouped_linear,grouped_linear_fp8_delayed,"
                                           "grouped_linear_fp8_delayed_cached_weights")
    parser.add_argument("--modes", default="fwd_no_grad,fwd_bwd")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--out", help="JSON of the figures")
    args = parser.parse_args(argv)
    if args.calls < 2:
        parser.error("--calls: expected an integer of at least 2")
    host_cases = {c.name: c for c in load_cases().host}
    cases = [host_cases[name] for name in csv_list(args.cases, tuple(host_cases), "--cases")]
    modes = csv_list(args.modes, host_overhead.MODES, "--modes")
    if not torch.cuda.is_available():
        print("bench.kernel_timeline: needs a GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device())
    records = []
    for case, candidate, mode, fn, grad_mode in host_overhead.asked_calls(cases, args.impls, modes,
                                                                         device):
        with candidate.region(), grad_mode:
            r = timeline(fn, args.calls)
        r.update(case=case.name, G=case.G, impl=candidate.name, mode=mode)
        records.append(r)
        print(f"{case.name} {candidate.name} {mode}: pace {r['pace_us']:.1f} us/call, "
              f"kernels {r.get('kernel_us', 0):.1f} us, gaps {r.get('gap_us', 0):.1f} us"
              + (f"  [{r['error']}]" if "error" in r else ""))
        for s in r.get("steps", []):
            print(f"    gap {s['gap_before_us']:6.2f}  run {s['us']:6.2f}  {s['name'][:110]}")
        sys.stdout.flush()
    if args.out:
        write_diagnostic(args.out, records, calls=args.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
