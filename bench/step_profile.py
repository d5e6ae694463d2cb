"""Where an end-to-end step's GPU time goes, kernel by kernel.

    python -m bench.step_profile [--cases mixtral_fc1,dsv3_ep8_fc1]
                                 [--recipes bf16,fp8_delayed,fp8_delayed_cached_weights]
                                 [--routing uniform|skewed|uniform_unaligned|uniform_sector_aligned]
                                 [--steps 5]

The step of `python -m bench`'s FP8 end-to-end section (bench/fp8_module.py),
run under torch.profiler: per case and recipe, each kernel's GPU time per
step (summed over its launches, averaged over the steps), the sum of all
kernels, and the step's wall time from CUDA events around the same steps
(wall minus kernels = the GPU's idle gaps). A diagnostic beside `python -m
bench`, not one of its sections; on a GPU only.
"""

import argparse
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import grouped_linear

from . import fp8_module
from .cases import ALL_ROUTINGS, csv_list, load_cases, make_splits, select_throughput_cases
from .report import write_diagnostic


def kernel_times_us(prof, steps: int) -> dict:
    per_kernel = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[event.name] += event.time_range.elapsed_us() / steps
    if not per_kernel:  # torch versions that list kernels only under their ops
        for event in prof.key_averages():
            if event.self_device_time_total > 0 and event.device_type == torch.autograd.DeviceType.CUDA:
                per_kernel[event.key] += event.self_device_time_total / steps
    return dict(sorted(per_kernel.items(), key=lambda kv: -kv[1]))


def profile_step(step, steps: int) -> dict:
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start.record()
        for _ in range(steps):
            step()
        end.record()
        torch.cuda.synchronize()
    kernels = kernel_times_us(prof, steps)
    return {"step_us": start.elapsed_time(end) * 1e3 / steps,
            "kernels_us": sum(kernels.values()), "per_kernel_us": kernels}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="mixtral_fc1,dsv3_ep8_fc1")
    parser.add_argument("--recipes", default="bf16,fp8_delayed,fp8_delayed_cached_weights")
    parser.add_argument("--routing", default="uniform", choices=ALL_ROUTINGS)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=12, help="kernels printed per step")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    cases = select_throughput_cases(load_cases(), True, csv_list(args.cases))
    names = csv_list(args.recipes, fp8_module.STEPS, "--recipes")
    if not (torch.cuda.is_available() and grouped_linear.with_cuda):
        print("step_profile: needs a GPU and a CUDA build of grouped_linear")
        return 2
    device = torch.device("cuda")
    records = []
    for case in cases:
        layer, x, dy = fp8_module.case_inputs(case, device)
        splits = make_splits(args.routing, case.G, case.T)
        for name in names:
            step = fp8_module.named_step(name, layer, x, dy, splits)
            r = profile_step(step, args.steps)
            r.update(case=case.name, routing=args.routing, recipe=name)
            records.append(r)
            print(f"{case.name} {args.routing} {name}: step {r['step_us']:.0f} us, "
                  f"kernels {r['kernels_us']:.0f} us")
            for kernel, us in list(r["per_kernel_us"].items())[:args.top]:
                print(f"  {us:9.1f} us  {kernel[:150]}")
        del layer, x, dy
        torch.cuda.empty_cache()
    if args.out:
        write_diagnostic(args.out, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
