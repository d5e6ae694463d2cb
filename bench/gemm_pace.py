"""A tiny grouped GEMM's GPU time against its group count and depth, beside torch's.

    python -m bench.gemm_pace [--groups 1,8,32,128] [--k 64,256,1024] [--n 256,64]
                              [--rows 16] [--calls 50] [--out PATH]

Our bf16 forward (`ops.forward`, output given) on `rows` rows an expert,
G experts of an N x K weight, queued behind a sleeping kernel so that the
GPU sets the pace (µs per call between two events, as
`python -m bench.host_pieces` times its GPU column). Beside it, in the same
process: one dense `torch.mm` of one expert's rows (cuBLAS: the cost of a
launch that has almost nothing to do) and `F.grouped_mm` of the same groups
(torch's own grouped kernel). Where ours stays above torch.mm at K = 64 it
pays a fixed cost of its own; where it grows with G faster than the weights'
bytes do, a cost per group. A diagnostic beside `python -m bench`; on a GPU
only.
"""

import argparse
import sys

import torch
import torch.nn.functional as F

from grouped_linear import ops

from .cases import checked_counts
from .host_pieces import gpu_us
from .report import write_diagnostic


def measure(groups: int, k: int, n: int, rows: int, calls: int) -> dict:
    device = "cuda"
    x = torch.randn(rows * groups, k, device=device, dtype=torch.bfloat16)
    w = torch.randn(groups, n, k, device=device, dtype=torch.bfloat16)
    y = torch.empty(rows * groups, n, device=device, dtype=torch.bfloat16)
    splits = [rows] * groups
    offs = torch.arange(rows, rows * groups + 1, rows, device=device, dtype=torch.int32)
    record = {"G": groups, "K": k, "N": n, "rows": rows,
              "weight_mb": groups * n * k * 2 / 1e6,
              "ours_us": gpu_us(lambda: ops.forward(x, w, None, splits, out=y), calls),
              "torch_mm_one_group_us": gpu_us(lambda: torch.mm(x[:rows], w[0].t()), calls)}
    try:
        record["F.grouped_mm_us"] = gpu_us(
            lambda: F.grouped_mm(x, w.transpose(-2, -1), offs=offs), calls)
    except (RuntimeError, AttributeError) as exc:  # torch builds without it
        record["F.grouped_mm_us"] = None
        record["F.grouped_mm_error"] = str(exc).splitlines()[0]
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default="1,8,32,128")
    parser.add_argument("--k", default="64,256,1024")
    parser.add_argument("--n", default="256,64")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--out", help="JSON of the figures")
    args = parser.parse_args(argv)
    parsed = checked_counts("bench.gemm_pace",
                            lists=[("--groups", args.groups), ("--k", args.k), ("--n", args.n)],
                            counts=[("--rows", args.rows), ("--calls", args.calls)])
    if parsed is None:
        return 2
    if not torch.cuda.is_available():
        print("bench.gemm_pace: needs a GPU", file=sys.stderr)
        return 2
    records = []
    print(f"{'G':>4} {'K':>5} {'N':>4} {'weights MB':>10} | {'ours':>7} | {'torch.mm':>8} "
          f"| {'F.grouped_mm':>12}   (µs a call, the GPU's pace)")
    for n in parsed["--n"]:
        for k in parsed["--k"]:
            for groups in parsed["--groups"]:
                r = measure(groups, k, n, args.rows, args.calls)
                records.append(r)
                gmm = r["F.grouped_mm_us"]
                print(f"{groups:4d} {k:5d} {n:4d} {r['weight_mb']:10.2f} | {r['ours_us']:7.2f} | "
                      f"{r['torch_mm_one_group_us']:8.2f} | "
                      f"{'-' if gmm is None else f'{gmm:12.2f}':>12}", flush=True)
    if args.out:
        write_diagnostic(args.out, records, calls=args.calls, rows=args.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
