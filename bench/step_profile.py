"""Where an end-to-end step's GPU time goes, kernel by kernel.

    python -m bench.step_profile [--cases mixtral_fc1,dsv3_ep8_fc1]
                                 [--recipes bf16,fp8_delayed,fp8_delayed_cached_weights]
                                 [--routing uniform] [--steps 5]

The step of `python -m bench`'s FP8 end-to-end section (bench/fp8_module.py),
run under torch.profiler: per case and recipe, each kernel's GPU time per
step (summed over its launches, averaged over the steps), the sum of all
kernels, and the step's wall time from CUDA events around the same steps
(wall minus kernels = the GPU's idle gaps). A diagnostic beside `python -m
bench`, not one of its sections; on a GPU only.
"""

import argparse
import json
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import grouped_linear

from . import fp8_module
from .cases import load_cases, make_splits


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
    parser.add_argument("--routing", default="uniform", choices=("uniform", "skewed"))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=12, help="kernels printed per step")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    if not (torch.cuda.is_available() and grouped_linear.with_cuda):
        print("step_profile: needs a GPU and a CUDA build of grouped_linear")
        return 2
    wanted = set(args.cases.split(","))
    recipes = {"bf16": None, **fp8_module.RECIPES, **fp8_module.CACHED}
    device = torch.device("cuda")
    records = []
    for case in [c for c in load_cases().throughput if c.name in wanted]:
        gen = torch.Generator(device=device).manual_seed(0)
        layer = grouped_linear.GroupedLinear(case.G, case.K, case.N, bias=False,
                                             params_dtype=torch.bfloat16, device=device)
        x = (torch.randn(case.T, case.K, device=device, generator=gen)
             .to(torch.bfloat16).requires_grad_(True))
        dy = (torch.randn(case.T, case.N, device=device, generator=gen) * 0.01).to(torch.bfloat16)
        splits = make_splits(args.routing, case.G, case.T)
        for name in args.recipes.split(","):
            make = recipes[name]
            recipe = None if make is None else make()
            first = None
            if name in fp8_module.CACHED:
                fp8_module.step_fn(layer, x, dy, splits, recipe, first_microbatch=True)()
                first = False
            step = fp8_module.step_fn(layer, x, dy, splits, recipe, first_microbatch=first)
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
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
