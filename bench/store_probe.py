"""How fast the GPU writes a wgrad's output, beside the wgrads themselves.

    python -m bench.store_probe [--cases a,b] [--out store_probe.json]

wgrad writes one G x N x K output from short reductions, so at 32-128 experts
the time to write that output bounds it (benchmarks/reading.md). The bound
was first taken from the H200's datasheet bandwidth (4.8 TB/s); this
measures it. Per throughput case, in one process:

  fill   torch's fill_ of a bf16 [G, N, K] tensor: writing the output alone
  copy   torch's copy_ into it from another one (read + write)
  dense  torch._scaled_mm of wgrad's M x N x K (E4M3, bf16 out), the
         benchmark's reference
  ours   the FP8 wgrad (E5M2 x E4M3, bf16 out, uniform routing) as a recipe
         runs it, promoting (split_accumulator=True) and fast (False)

and reports the write bandwidth (output bytes / fill time), each wgrad's
ratio to dense, and the store bound dense / fill: the ratio no wgrad that
writes its output can pass. A diagnostic beside `python -m bench`, not one
of its sections; on a GPU only.
"""

import argparse
import sys

import torch

import grouped_linear
from grouped_linear import ops

from . import fp8_throughput as fp8
from .cases import csv_list, load_cases, make_splits, select_throughput_cases
from .report import write_diagnostic
from .timing import CudaEventTimer, median_ms


def measure(case, timer, warmup: int, reps: int) -> dict:
    device = torch.device("cuda")
    out_bytes = case.G * case.N * case.K * 2
    out = torch.empty(case.G, case.N, case.K, dtype=torch.bfloat16, device=device)
    src = torch.randn(case.G, case.N, case.K, device=device).to(torch.bfloat16)
    fill_ms = median_ms(timer, lambda: out.fill_(1.0), warmup, reps)
    copy_ms = median_ms(timer, lambda: out.copy_(src), warmup, reps)
    src = None  # frees the copy's source before the GEMMs run
    dense_ms = median_ms(timer, fp8.dense_fp8("wgrad", case, device), warmup, reps)

    gen = torch.Generator(device=device).manual_seed(0)
    splits = make_splits("uniform", case.G, case.T)
    x = torch.randn(case.T, case.K, device=device, generator=gen)
    dy = torch.randn(case.T, case.N, device=device, generator=gen) * 0.01
    xq, sx = fp8.quantize(x, fp8.E4M3)
    dyq, sdy = fp8.quantize(dy, fp8.E5M2)
    del x, dy
    dyq_t, xq_t = fp8.columnwise(dyq, splits), fp8.columnwise(xq, splits)
    wgrad_ms = {}
    for label, split in (("promoting", True), ("fast", False)):
        wgrad_ms[label] = median_ms(
            timer, lambda split=split: ops.fp8_wgrad(dyq_t, sdy, xq_t, sx, splits, case.T,
                                                     out=out, split_accumulator=split),
            warmup, reps)
    return {
        "case": case.name, "G": case.G, "K": case.K, "N": case.N, "T": case.T,
        "output_bytes": out_bytes,
        "fill_ms": fill_ms, "fill_tb_per_s": out_bytes / fill_ms / 1e9,
        "copy_ms": copy_ms, "copy_tb_per_s": 2 * out_bytes / copy_ms / 1e9,
        "dense_fp8_ms": dense_ms,
        "store_bound_ratio": dense_ms / fill_ms,
        "wgrad_ms": wgrad_ms,
        "wgrad_ratio_to_dense": {k: dense_ms / v for k, v in wgrad_ms.items()},
        "wgrad_over_fill": {k: v / fill_ms for k, v in wgrad_ms.items()},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--out", default="")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args(argv)
    cases = select_throughput_cases(load_cases(), True, csv_list(args.cases))
    if not (torch.cuda.is_available() and grouped_linear.with_cuda):
        print("store_probe: needs a GPU and a CUDA build of grouped_linear")
        return 2
    timer = CudaEventTimer(torch.device("cuda"))
    records = []
    for case in cases:
        r = measure(case, timer, args.warmup, args.reps)
        records.append(r)
        print(f"{r['case']:16s} out {r['output_bytes'] / 1e9:5.2f} GB  "
              f"fill {r['fill_ms']:.3f} ms ({r['fill_tb_per_s']:.2f} TB/s)  "
              f"copy {r['copy_tb_per_s']:.2f} TB/s  dense {r['dense_fp8_ms']:.3f} ms  "
              f"store bound {r['store_bound_ratio']:.2f}  "
              + "  ".join(f"{k} {r['wgrad_ms'][k]:.3f} ms ({r['wgrad_ratio_to_dense'][k]:.2f}, "
                          f"{r['wgrad_over_fill'][k]:.2f}x fill)" for k in r["wgrad_ms"]),
              flush=True)
        torch.cuda.empty_cache()
    if args.out:
        write_diagnostic(args.out, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
