"""Where the grouped GEMMs lose to dense: the forward and dgrad at 32-128
experts, wgrad with many experts or skewed routing.

    python -m bench.group_probe [--cases a,b] [--roles fwd,dgrad,wgrad]
                                [--precisions fp8,fp8_fast,bf16] [--kernel NAME] [--out F]
                                [--splittings a,b] [--tile-orders auto,along_m,...] [--profile]

At 8 experts our forward and dgrad run at 0.86-1.04 of one dense GEMM of
the same M, N, K; at 32-128 experts at 0.58-0.85 (BENCHMARKS.md). This
splits that gap. Per throughput case, role and precision, in one process,
the automatically chosen kernel of the sm90 engine on the same total rows
split five ways:

  one_group      all T rows as one group (one weight): the kernel's own
                 speed on the shape, with no group to switch to
  uniform        the benchmark's uniform routing (every case's groups are
                 whole 128-row tiles there): what groups cost, their
                 operand updates and their weights' bytes
  skewed         the benchmark's skewed routing
  skewed_tiles   the skewed sizes each rounded up to whole 128-row tiles
                 (so T grows by the padding): the skewed distribution with
                 every tile full
  uniform_64     uniform sizes, each 64 rows short of a whole tile: half
                 of every group's last tile empty

and the dense GEMM of the benchmark (torch._scaled_mm for FP8, fast
accumulation for fp8_fast; torch.matmul for bf16). --kernel forces one
kernel by name where its role and types match (ops.set_kernel_override;
the other products keep the automatic choice). Each figure is TFLOP/s
over the rows actually routed and its ratio to dense; the row fill is the
routed rows over the 128-row tiles that cover them. one_group / dense is
the kernel, uniform / one_group the groups, skewed_tiles / uniform the
distribution, skewed / skewed_tiles the partly filled tiles. For wgrad
(on the FP8 column-wise copies of each splitting) the rows are each
group's reduction: one_group writes one N x K gradient where the others
write G, so uniform / one_group is what G outputs cost, and skewed /
skewed_tiles what each group's partly filled last 128-deep k-block
costs.
--tile-orders runs each splitting under each of the sm90 engine's tile
orders (ops.set_tile_order; "auto", the default, is its automatic choice),
one record each. --profile times nothing: it runs dense and each splitting
once, after warmup, between cudaProfilerStart and Stop in an NVTX range
"case:role:precision:splitting[@order]", for Nsight Compute:

    ncu --profile-from-start off --nvtx --clock-control none --section SpeedOfLight \
        python -m bench.group_probe --profile --cases qwen3_30b_fc1 --roles fwd \
        --precisions fp8 --splittings one_group,uniform

A diagnostic beside `python -m bench`, not one of its sections; on a GPU
only.
"""

import argparse
import sys
from typing import Callable, Dict, List, Sequence

import torch

import grouped_linear
from grouped_linear import ops

from . import fp8_throughput as fp8
from . import peers
from .cases import TILE_ORDERS, csv_list, load_cases, make_splits, select_throughput_cases
from .report import write_diagnostic
from .throughput import DY_SCALE, W_SCALE, X_SCALE
from .timing import CudaEventTimer, median_ms

PRECISIONS = ("fp8", "fp8_fast", "bf16")
ROLES = ("fwd", "dgrad", "wgrad")
ENGINE = "sm90_grouped"
SPLITTINGS = ("one_group", "uniform", "skewed", "skewed_tiles", "uniform_64")
ORDERS = ("auto",) + TILE_ORDERS  # "auto": the engine's automatic order
TILE_ROWS = 128


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def splittings(G: int, T: int) -> Dict[str, List[int]]:
    skewed = make_splits("skewed", G, T)
    uniform = make_splits("uniform", G, T)
    return {
        "one_group": [T],
        "uniform": uniform,
        "skewed": skewed,
        "skewed_tiles": [round_up(m, TILE_ROWS) for m in skewed],
        "uniform_64": [max(round_up(m, TILE_ROWS) - TILE_ROWS // 2, 0) for m in uniform],
    }


def row_fill(splits: Sequence[int]) -> float:
    covered = sum(round_up(m, TILE_ROWS) for m in splits)
    return sum(splits) / covered if covered else 0.0


def products(case, precision: str, role: str, device) -> Dict[str, Callable]:
    """"ours": the role's product for a splitting (splits -> callable), on
    operands with rows for the largest splitting; "dense": the benchmark's
    dense GEMM (bf16 also returns its "operands", for the tests)."""
    G, K, N = case.G, case.K, case.N
    rows = max(sum(s) for s in splittings(G, case.T).values())
    gen = torch.Generator(device=device).manual_seed(0)
    if precision == "bf16":
        dt = torch.bfloat16
        x = torch.randn(rows, K, dtype=dt, device=device, generator=gen) * X_SCALE
        dy = torch.randn(rows, N, dtype=dt, device=device, generator=gen) * DY_SCALE
        w = torch.randn(G, N, K, dtype=dt, device=device, generator=gen) * W_SCALE

        def ours(splits):
            t, g = sum(splits), len(splits)
            if role == "fwd":
                return lambda: ops.forward(x[:t], w[:g], None, splits)
            if role == "wgrad":
                return lambda: ops.wgrad(dy[:t], x[:t], splits)[0]
            return lambda: ops.dgrad(dy[:t], w[:g], splits)
        return {"ours": ours, "dense": peers.dense_product(role, x[:case.T], w, dy[:case.T]),
                "operands": {"x": x, "dy": dy, "w": w}}
    split = precision == "fp8"
    xq, sx = fp8.quantize(torch.randn(rows, K, device=device, generator=gen), fp8.E4M3)
    dyq, sdy = fp8.quantize(torch.randn(rows, N, device=device, generator=gen) * 0.01, fp8.E5M2)
    if role != "wgrad":  # wgrad reads no weight
        w = torch.randn(G, N, K, device=device, generator=gen) * 0.02
        wq, sw = fp8.quantize(w, fp8.E4M3)  # one scale: the time does not depend on it
        del w
        sw = sw.expand(G).contiguous()
        wq_t = wq.transpose(1, 2).contiguous() if role == "dgrad" else None

    def ours(splits):
        t, g = sum(splits), len(splits)
        if role == "fwd":
            return lambda: ops.fp8_forward(xq[:t], sx, wq[:g], sw[:g], None, splits,
                                           split_accumulator=split)
        if role == "wgrad":  # the splitting's column-wise copies, made before timing
            dyq_t, xq_t = fp8.columnwise(dyq[:t], splits), fp8.columnwise(xq[:t], splits)
            return lambda: ops.fp8_wgrad(dyq_t, sdy, xq_t, sx, splits, t,
                                         split_accumulator=split)
        return lambda: ops.fp8_dgrad(dyq[:t], sdy, wq_t[:g], sw[:g], splits,
                                     split_accumulator=split)
    return {"ours": ours, "dense": fp8.dense_fp8(role, case, device, fast=not split)}


class tile_order:
    """The sm90 engine's tile order for a block ("auto": its automatic one),
    restored to the automatic one however the block ends."""

    def __init__(self, order: str):
        self.order = order

    def __enter__(self):
        ops.set_tile_order("cuda", ENGINE, "" if self.order == "auto" else self.order)

    def __exit__(self, *exc):
        ops.set_tile_order("cuda", ENGINE, "")


def measure(case, precision: str, role: str, timer, warmup: int, reps: int,
            names: Sequence[str] = SPLITTINGS, order: str = "auto") -> dict:
    device = torch.device("cuda")
    fns = products(case, precision, role, device)
    dense_ms = median_ms(timer, fns["dense"], warmup, reps)
    dense_tflops = case.flops() / dense_ms / 1e9
    record = {"case": case.name, "G": case.G, "K": case.K, "N": case.N, "T": case.T,
              "precision": precision, "role": role, "tile_order": order, "dense_ms": dense_ms,
              "dense_tflops": dense_tflops, "splittings": {}}
    every = splittings(case.G, case.T)
    with tile_order(order):
        for name in names:
            splits = every[name]
            fn = fns["ours"](splits)
            ms = median_ms(timer, fn, warmup, reps)
            tflops = 2 * sum(splits) * case.K * case.N / ms / 1e9
            record["splittings"][name] = {
                "groups": len(splits), "rows": sum(splits), "row_fill": row_fill(splits),
                "ms": ms, "tflops": tflops, "ratio_to_dense": tflops / dense_tflops}
    del fns
    torch.cuda.empty_cache()
    return record


def profile(case, precision: str, role: str, warmup: int, names: Sequence[str],
            orders: Sequence[str]) -> List[str]:
    """Dense and each splitting once under each order, each between
    cudaProfilerStart and Stop in its own NVTX range; returns the ranges."""
    fns = products(case, precision, role, torch.device("cuda"))
    every = splittings(case.G, case.T)
    runs = [(f"{case.name}:{role}:{precision}:dense", "auto", fns["dense"])]
    runs += [(f"{case.name}:{role}:{precision}:{name}" + ("" if order == "auto" else f"@{order}"),
              order, fns["ours"](every[name])) for order in orders for name in names]
    for label, order, fn in runs:
        with tile_order(order):
            for _ in range(warmup):
                fn()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push(label)
            torch.cuda.profiler.start()
            fn()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            torch.cuda.nvtx.range_pop()
    labels = [label for label, _, _ in runs]
    del fns, runs
    torch.cuda.empty_cache()
    return labels


def summary_line(r: dict) -> str:
    """Each splitting's ratio to dense, then the factors whose splittings ran."""
    s = r["splittings"]
    ratio = {k: v["ratio_to_dense"] for k, v in s.items()}
    order = r.get("tile_order", "auto")
    line = (f"{r['case']:14s} {r['precision']:8s} {r['role']:5s}"
            + ("" if order == "auto" else f" @{order}")
            + f" dense {r['dense_tflops']:6.0f}  "
            + "  ".join(f"{k} {ratio[k]:.2f}" for k in SPLITTINGS if k in ratio))
    factors = [("groups", "uniform", "one_group"), ("distribution", "skewed_tiles", "uniform"),
               ("fill", "skewed", "skewed_tiles")]
    shown = [f"{name} {ratio[a] / ratio[b]:.2f}" for name, a, b in factors
             if a in ratio and b in ratio and ratio[b] > 0]
    if shown:
        line += "  | " + "  ".join(shown)
    if "skewed" in s:
        line += f" (row fill {s['skewed']['row_fill']:.2f})"
    return line


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--roles", default=",".join(ROLES))
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--splittings", default=",".join(SPLITTINGS))
    parser.add_argument("--tile-orders", default="auto",
                        help=f"comma-separated sm90 tile orders, of {', '.join(ORDERS)}")
    parser.add_argument("--kernel", default="", help="an sm90 kernel to force where it applies")
    parser.add_argument("--profile", action="store_true",
                        help="run each product once for a profiler instead of timing it")
    parser.add_argument("--out", default="")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args(argv)
    roles = csv_list(args.roles, ROLES, "--roles")
    precisions = csv_list(args.precisions, PRECISIONS, "--precisions")
    names = csv_list(args.splittings, SPLITTINGS, "--splittings")
    orders = csv_list(args.tile_orders, ORDERS, "--tile-orders")
    cases = select_throughput_cases(load_cases(), True, csv_list(args.cases))
    if not (torch.cuda.is_available() and grouped_linear.with_cuda):
        print("group_probe: needs a GPU and a CUDA build of grouped_linear")
        return 2
    if args.kernel:
        built = ops.kernel_names("cuda", ENGINE)
        if args.kernel not in built:
            raise SystemExit(f"--kernel: got {args.kernel!r}, expected one of the built "
                             f"{ENGINE} kernels: {', '.join(built)}")
        ops.set_kernel_override("cuda", ENGINE, args.kernel)
    timer = CudaEventTimer(torch.device("cuda"))
    records = []
    for case in cases:
        for precision in precisions:
            for role in roles:
                if args.profile:
                    for label in profile(case, precision, role, args.warmup, names, orders):
                        print("profiled", label, flush=True)
                    continue
                for order in orders:
                    records.append(measure(case, precision, role, timer, args.warmup, args.reps,
                                           names, order))
                    print(summary_line(records[-1]), flush=True)
    if args.out and not args.profile:
        write_diagnostic(args.out, records, roles=roles, precisions=precisions,
                         splittings=names, tile_orders=orders, kernel_override=args.kernel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
