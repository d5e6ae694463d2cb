"""One group's wgrad split along its reduction, against the same wgrad unsplit.

    python -m bench.split_probe [--shapes T:N:K,...] [--precisions bf16,fp8]
                                [--warmup 2] [--reps 10] [--out F]

A wgrad's tile grid is out_features x in_features a group, whatever its
rows, so `Linear` (one group) on many rows with a small weight leaves most
SMs idle through its long reduction. Where its tiles fill at most half the
SMs, the sm90 engine splits the rows into pieces that one launch reduces as
groups of float32 partial gradients, then sums them
(csrc/core/cuda/sm90/split_reduction.h). Per shape (T rows, an N x K
weight) and precision, in one process:

  split     ops.wgrad / ops.fp8_wgrad with the sizes on the host: the
            engine splits where its rule says
  unsplit   the same call with the sizes in device memory, which the engine
            never splits (it does not read sizes back to decide)
  dense     one GEMM of the same M, N, K (torch.matmul of dYᵀ X in bf16;
            torch._scaled_mm for FP8, as the benchmark's dense)

Shapes default to the benchmark cases' rows as one group (qwen3 fc2 is the
one that splits) and four small-weight layers; 8192 x 4096 x 4096 splits
nowhere and shows the two paths equal. A diagnostic beside `python -m
bench`, not one of its sections; on a GPU only.
"""

import argparse
import sys
from typing import Callable, Dict, List, Tuple

import torch

import grouped_linear
from grouped_linear import ops

from . import fp8_throughput as fp8
from .cases import ThroughputCase, csv_list, load_cases
from .report import write_diagnostic
from .timing import CudaEventTimer, median_ms

PRECISIONS = ("bf16", "fp8")
EXTRA_SHAPES = ((16384, 1024, 1024), (32768, 768, 2048), (65536, 512, 512), (8192, 4096, 4096))


def default_shapes() -> List[Tuple[int, int, int]]:
    cases = [(c.T, c.N, c.K) for c in load_cases().throughput]
    return cases + [s for s in EXTRA_SHAPES if s not in cases]


def parse_shapes(text: str) -> List[Tuple[int, int, int]]:
    shapes = []
    for item in csv_list(text) or []:
        parts = item.split(":")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise SystemExit(f"--shapes: got {item!r}, expected T:N:K with positive integers")
        shapes.append(tuple(int(p) for p in parts))
    return shapes


def products(T: int, N: int, K: int, precision: str, device) -> Dict[str, Callable]:
    """split / unsplit / dense for one shape; each returns its gradient (the
    FP8 dense is torch._scaled_mm, CUDA only: left out on the CPU)."""
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(T, K, device=device, generator=gen)
    dy = torch.randn(T, N, device=device, generator=gen) * 0.01
    on_device = torch.tensor([T], device=device)
    if precision == "bf16":
        x, dy = x.to(torch.bfloat16), dy.to(torch.bfloat16)
        return {"split": lambda: ops.wgrad(dy, x, [T])[0],
                "unsplit": lambda: ops.wgrad(dy, x, on_device)[0],
                "dense": lambda: torch.matmul(dy.t(), x)}
    xq, sx = fp8.quantize(x, fp8.E4M3)
    dyq, sdy = fp8.quantize(dy, fp8.E5M2)
    dyq_t, xq_t = fp8.columnwise(dyq, [T]), fp8.columnwise(xq, [T])
    case = ThroughputCase("split_probe", G=1, K=K, N=N, T=T)
    fns = {"split": lambda: ops.fp8_wgrad(dyq_t, sdy, xq_t, sx, [T], T),
           "unsplit": lambda: ops.fp8_wgrad(dyq_t, sdy, xq_t, sx, on_device, T)}
    if device.type == "cuda":
        fns["dense"] = fp8.dense_fp8("wgrad", case, device)
    return fns


def measure(T: int, N: int, K: int, precision: str, timer, warmup: int, reps: int) -> dict:
    fns = products(T, N, K, precision, torch.device("cuda"))
    ms = {name: median_ms(timer, fn, warmup, reps) for name, fn in fns.items()}
    record = {"T": T, "N": N, "K": K, "precision": precision,
              **{f"{name}_ms": value for name, value in ms.items()},
              "split_ratio_to_dense": ms["dense"] / ms["split"],
              "unsplit_ratio_to_dense": ms["dense"] / ms["unsplit"]}
    del fns
    torch.cuda.empty_cache()
    return record


def summary_line(r: dict) -> str:
    return (f"T {r['T']:6d} N {r['N']:5d} K {r['K']:5d} {r['precision']:4s}  "
            f"split {r['split_ratio_to_dense']:.2f}  unsplit {r['unsplit_ratio_to_dense']:.2f}"
            f"  of dense (x{r['unsplit_ms'] / r['split_ms']:.2f})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="", help="comma-separated T:N:K (default: see above)")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    precisions = csv_list(args.precisions, PRECISIONS, "--precisions")
    shapes = parse_shapes(args.shapes) or default_shapes()
    if not (torch.cuda.is_available() and grouped_linear.with_cuda):
        print("split_probe: needs a GPU and a CUDA build of grouped_linear")
        return 2
    timer = CudaEventTimer(torch.device("cuda"))
    records = []
    for T, N, K in shapes:
        for precision in precisions:
            records.append(measure(T, N, K, precision, timer, args.warmup, args.reps))
            print(summary_line(records[-1]), flush=True)
    if args.out:
        write_diagnostic(args.out, records, precisions=precisions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
