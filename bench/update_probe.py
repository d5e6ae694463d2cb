"""Delayed scaling's step-boundary update on its own: its GPU time per step.

    python -m bench.update_probe [--groups 8,32,128] [--history 1,16,1024]
                                 [--steps 5] [--out FILE]

Per group count G and history length L: a GroupedLinear(G, 1024, 1024)
runs forward+backward under DelayedScaling(amax_history_len=L), and
torch.profiler gives the time of each launch of the update kernel
(`update_kernel`, core/fp8/cuda/delayed_scaling_cuda.cu), which rolls every
registered amax history and recomputes the scales once per step for all
modules at once. Its cost is fixed per step, whatever the layer's size, so
it shows most in small steps. A diagnostic beside `python -m bench`; on a
GPU only.
"""

import argparse
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import grouped_linear
from grouped_linear import fp8

from .cases import checked_counts
from .report import write_diagnostic

FEATURES = 1024
ROWS_PER_GROUP = 64
KERNEL = "update_kernel"


def measure(groups: int, history: int, steps: int, device) -> dict:
    torch.manual_seed(0)
    module = grouped_linear.GroupedLinear(groups, FEATURES, FEATURES, bias=False,
                                          params_dtype=torch.bfloat16, device=device)
    x = torch.randn(groups * ROWS_PER_GROUP, FEATURES, device=device, dtype=torch.bfloat16,
                    requires_grad=True)
    splits = [ROWS_PER_GROUP] * groups
    recipe = fp8.DelayedScaling(amax_history_len=history)

    def step():
        with grouped_linear.autocast(recipe=recipe):
            y = module(x, splits)
        y.float().sum().backward()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    launches = [e.time_range.elapsed_us() for e in prof.events()
                if e.device_type == torch.autograd.DeviceType.CUDA and KERNEL in e.name]
    return {"G": groups, "history_len": history, "steps": steps, "launch_us": launches,
            "median_us": statistics.median(launches) if launches else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default="8,32,128")
    parser.add_argument("--history", default="1,16,1024", help="amax history lengths")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", help="JSON of the figures")
    args = parser.parse_args(argv)
    parsed = checked_counts("bench.update_probe",
                            lists=[("--groups", args.groups), ("--history", args.history)],
                            counts=[("--steps", args.steps)])
    if parsed is None:
        return 2
    groups, histories = parsed["--groups"], parsed["--history"]
    if not (torch.cuda.is_available() and grouped_linear.with_cuda):
        print("bench.update_probe: needs a GPU and a CUDA build of grouped_linear",
              file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device())
    records = []
    for group_count in groups:
        for history in histories:
            record = measure(group_count, history, args.steps, device)
            records.append(record)
            launches = ", ".join(f"{us:.1f}" for us in record["launch_us"])
            print(f"G={group_count:4d} history={history:5d}: {len(record['launch_us'])} update "
                  f"launches in {args.steps} steps, us each: {launches}", flush=True)
    if args.out:
        write_diagnostic(args.out, records, steps=args.steps, features=FEATURES,
                         rows_per_group=ROWS_PER_GROUP)
    return 0


if __name__ == "__main__":
    sys.exit(main())
