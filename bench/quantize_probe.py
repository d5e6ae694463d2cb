"""What the FP8 weight quantization costs per call, and at what bandwidth.

    python -m bench.quantize_probe [--groups 32 --out-features 4096 --in-features 7168]

A GroupedLinear under DelayedScaling: a forward that quantizes its weights
(is_first_microbatch=None) minus one that reuses them (False) is the weight
quantization, with grad on (row- and column-wise FP8 copies) and off
(row-wise only). A few rows of input keep the rest of the forward small. The
bytes counted: the bf16 weights read once, one byte per element per copy
written. For scale: torch's bf16 -> fp32 copy of the same weights. A
diagnostic for the end-to-end rows of `python -m bench`, not one of its
sections; on a GPU only (works with or without the sm90 engine).
"""

import argparse
import sys

import torch

import grouped_linear
from grouped_linear import fp8


def median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=32)
    parser.add_argument("--out-features", type=int, default=4096)
    parser.add_argument("--in-features", type=int, default=7168)
    parser.add_argument("--rows", type=int, default=256, help="input rows, split evenly")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args(argv)
    if not (torch.cuda.is_available() and grouped_linear.with_cuda):
        print("quantize_probe: needs a GPU and a CUDA build of grouped_linear")
        return 2
    g, n, k, rows = args.groups, args.out_features, args.in_features, args.rows
    torch.manual_seed(0)
    module = grouped_linear.GroupedLinear(g, k, n, bias=False, params_dtype=torch.bfloat16,
                                          device="cuda")
    x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    splits = [rows // g] * (g - 1) + [rows - rows // g * (g - 1)]
    recipe = fp8.DelayedScaling()

    def forward(first, grad):
        def run():
            with torch.set_grad_enabled(grad), grouped_linear.autocast(recipe=recipe):
                module(x, splits, is_first_microbatch=first)
        return run

    forward(True, True)()  # fills the weight cache
    elements = g * n * k
    print(f"G={g} N={n} K={k}: {elements / 1e6:.0f} M weight elements, engine "
          f"{grouped_linear.engine_for(torch.device('cuda'))}")
    for grad in (True, False):
        each = median_ms(forward(None, grad), args.reps)
        cached = median_ms(forward(False, grad), args.reps)
        moved = elements * (2 + 1 + (1 if grad else 0))
        cost = each - cached
        print(f"grad {'on ' if grad else 'off'} ({'row- and column-wise' if grad else 'row-wise'}):"
              f" quantizing {each:.3f} ms, cached {cached:.3f} ms, weight quantization "
              f"{cost:.3f} ms = {moved / 1e9:.2f} GB at {moved / cost / 1e9:.2f} TB/s")
    weight = module.weight.detach()
    copy = median_ms(lambda: weight.float(), args.reps)
    print(f"torch bf16 -> fp32 copy of the weights: {copy:.3f} ms = "
          f"{elements * 6 / copy / 1e9:.2f} TB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
