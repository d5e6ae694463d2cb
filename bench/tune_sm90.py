"""Measure every built kernel of the sm90_grouped engine on the benchmark's
throughput cases, to choose the tile configuration per role and problem.

    python -m bench.tune_sm90 [--out tune.json] [--cases a,b] [--roles fwd,wgrad]
                              [--precision bf16|fp8|fp8_block]
                              [--tile-orders along_m,along_n,shorter_side]
                              [--routings uniform,skewed,uniform_unaligned,...]
                              [--kernels widestore,halfcoop128x256]
                              [--output bf16|fp16] [--cases-file FILE]

Build with the candidates first: `GL_SM90_TUNING=1 scripts/setup.sh` (CMake
option GL_SM90_TUNING=ON). bf16: the bf16 kernels (fp16 runs the same
tiles), against torch.matmul. fp8: the per-tensor FP8 kernels of the HYBRID
recipe (E4M3 forward, E5M2 gradients, bf16 out), operands quantized as
`python -m bench --sections fp8` does, against torch._scaled_mm; the fp8
role `wgrad_main_grad` (only when named in --roles) adds wgrad into a
float32 main_grad (fuse_wgrad_accumulation), against the same dense wgrad.
`--output fp16` times the fp8 kernels that write fp16 (for layers in fp16)
against torch._scaled_mm writing fp16. `--cases-file` reads the throughput
cases from another file of bench_cases.json's form, e.g.
bench/short_group_cases.json (the benchmark's shapes at 512-1536 rows a
group, for the rules that switch at an average group size).
fp8_block: the blockwise-scaled kernels (Float8BlockScaling: E4M3, bf16
out) on the operands and scales of the FP8 section's blockwise rows,
against torch.nn.functional.scaled_mm with the same block scalings (or
torch._scaled_mm with per-tensor scales where this torch has no blockwise
one; the record says which).
Each figure is the median of CUDA-event timed runs, as a ratio to a dense
GEMM of the same M, N, K measured in the same process. --tile-orders times
each kernel under each order in which the CTAs can walk a group's tiles
(ops.set_tile_order; recorded as "kernel@order"); without it, under the
automatic one. --kernels keeps the kernels whose names contain one of the
given parts (the rest are not timed; each is still checked against the
automatic choice's result), so that one comparison fits a short run.
"""

import argparse
import sys
from typing import Dict, List

import torch

from grouped_linear import ops

from . import fp8_throughput as fp8
from . import peers
from .cases import (ALL_ROUTINGS, ROLES, ROUTINGS, TILE_ORDERS, csv_list, load_cases, make_splits,
                    select_throughput_cases)
from .throughput import DY_SCALE, W_SCALE, X_SCALE, grouped_linear_product, relative_error
from .report import write_diagnostic
from .timing import CudaEventTimer, median_ms

ENGINE = "sm90_grouped"
ROLE_PREFIX = {"fwd": "forward_bf16_", "dgrad": "dgrad_bf16_", "wgrad": "wgrad_bf16_"}
FP8_ROLE_PREFIX = {"fwd": "forward_e4m3_bf16_", "dgrad": "dgrad_e5m2_bf16_",
                   "wgrad": "wgrad_e5m2_bf16_", "wgrad_main_grad": "wgrad_e5m2_to_fp32_"}
OUTPUTS = {"bf16": torch.bfloat16, "fp16": torch.float16}
BLOCK_ROLE_PREFIX = {"fwd": "forward_e4m3_bf16_block_", "dgrad": "dgrad_e4m3_bf16_block_",
                     "wgrad": "wgrad_e4m3_bf16_block_"}


def time_kernels(fn, prefix: str, kernels: List[str], row: Dict, dense_ms: float, timer,
                 args, result=None) -> None:
    """Every kernel whose name starts with `prefix` (forced by name), timed
    under each of args.tile_orders, its result compared with the automatic
    choice's. `result` (default fn) gives the value compared, where fn adds
    into a buffer."""
    result = result or fn
    ops.set_kernel_override("cuda", ENGINE, "")
    ops.set_tile_order("cuda", ENGINE, "")
    reference = result()
    for name in kernels:
        if (not name.startswith(prefix) or ("_block_" in name) != ("_block_" in prefix)
                or ("_to_fp32_" in name) != ("_to_fp32_" in prefix)):
            continue
        ops.set_kernel_override("cuda", ENGINE, name)
        for order in args.tile_orders or [""]:
            ops.set_tile_order("cuda", ENGINE, order)
            got = result()
            err = relative_error(got, reference)
            del got
            ms = median_ms(timer, fn, args.warmup, args.reps)
            row["kernels"][f"{name}@{order}" if order else name] = {
                "ms": ms, "ratio_to_dense": dense_ms / ms, "rel_err_vs_default": err}
    ops.set_kernel_override("cuda", ENGINE, "")
    ops.set_tile_order("cuda", ENGINE, "")
    if not row["kernels"]:
        print(f"{row['case']:16s} {row['routing']:8s} {row['role']:6s} no {prefix}* kernel built")
        return
    best = max(row["kernels"].items(), key=lambda kv: kv[1]["ratio_to_dense"])
    print(f"{row['case']:16s} {row['routing']:8s} {row['role']:6s} " + "  ".join(
        f"{n[len(prefix):]}={r['ratio_to_dense']:.2f}" for n, r in row["kernels"].items())
        + f"   best {best[0]}", flush=True)


def select_kernels(names: List[str], parts: List[str]) -> List[str]:
    """The names containing one of `parts` (all of them without parts);
    SystemExit naming any part that matches no kernel."""
    if not parts:
        return list(names)
    unmatched = [p for p in parts if not any(p in n for n in names)]
    if unmatched:
        raise SystemExit(f"tune_sm90: --kernels: {unmatched} match no built kernel of {ENGINE}; "
                         f"built: {', '.join(names)}")
    return [n for n in names if any(p in n for p in parts)]


def new_row(case, routing: str, role: str, dense_ms: float) -> Dict:
    return {"case": case.name, "routing": routing, "role": role, "G": case.G, "K": case.K,
            "N": case.N, "T": case.T, "dense_ms": dense_ms, "kernels": {}}


def measure_bf16_case(case, roles, kernels, device, timer, args) -> List[Dict]:
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(case.T, case.K, dtype=torch.bfloat16, device=device, generator=gen) * X_SCALE
    w = torch.randn(case.G, case.N, case.K, dtype=torch.bfloat16, device=device,
                    generator=gen) * W_SCALE
    dy = torch.randn(case.T, case.N, dtype=torch.bfloat16, device=device,
                     generator=gen) * DY_SCALE
    rows = []
    for role in roles:
        dense_ms = median_ms(timer, peers.dense_product(role, x, w, dy), args.warmup, args.reps)
        for routing in args.routings:
            splits = make_splits(routing, case.G, case.T)
            fn = grouped_linear_product(role, ENGINE, x, w, dy, splits)
            row = new_row(case, routing, role, dense_ms)
            time_kernels(fn, ROLE_PREFIX[role], kernels, row, dense_ms, timer, args)
            rows.append(row)
    return rows


def increment_of(fn, buffer):
    """What fn adds into buffer, from zero: the value compared when fn accumulates."""
    def result():
        buffer.zero_()
        fn()
        return buffer.clone()
    return result


def fp8_role_prefix(role: str, output: str) -> str:
    """The kernel-name prefix of an fp8 role writing `output` (bf16, fp16)."""
    prefix = FP8_ROLE_PREFIX[role]
    return prefix.replace("_bf16_", f"_{output}_") if role != "wgrad_main_grad" else prefix


def measure_fp8_case(case, roles, kernels, device, timer, args) -> List[Dict]:
    out_dtype = OUTPUTS[args.output]
    op = fp8.Operands(case, device)  # the FP8 section's operands
    rows = []
    main_grad = None
    for role in roles:
        dense_role = "wgrad" if role == "wgrad_main_grad" else role
        dense_out = torch.bfloat16 if role == "wgrad_main_grad" else out_dtype
        dense_ms = median_ms(timer, fp8.dense_fp8(dense_role, case, device, out_dtype=dense_out),
                             args.warmup, args.reps)
        for routing in args.routings:
            splits = make_splits(routing, case.G, case.T)
            dyq_t = xq_t = None
            if dense_role == "wgrad":
                dyq_t, xq_t = fp8.columnwise(op.dyq, splits), fp8.columnwise(op.xq, splits)
            if role != "wgrad_main_grad":
                fn = fp8.per_tensor_product(role, case, op, splits, dyq_t, xq_t,
                                            out_dtype=out_dtype)
            else:  # accumulated into a float32 buffer
                if main_grad is None:
                    main_grad = torch.zeros(case.G, case.N, case.K, device=device)
                fn = lambda: ops.fp8_wgrad(dyq_t, op.sdy, xq_t, op.sx, splits,  # noqa: E731
                                           case.T, out=main_grad, accumulate=True,
                                           out_dtype=torch.float32)
            result = None if role != "wgrad_main_grad" else increment_of(fn, main_grad)
            row = new_row(case, routing, role, dense_ms)
            row["output"] = "fp32" if role == "wgrad_main_grad" else args.output
            time_kernels(fn, fp8_role_prefix(role, args.output), kernels, row, dense_ms, timer,
                         args, result)
            rows.append(row)
    return rows


def measure_block_case(case, roles, kernels, device, timer, args) -> List[Dict]:
    gen = torch.Generator(device=device).manual_seed(0)
    xq = torch.randn(case.T, case.K, device=device, generator=gen).to(fp8.E4M3)
    wq = torch.randn(case.G, case.N, case.K, device=device, generator=gen).to(fp8.E4M3)
    dyq = torch.randn(case.T, case.N, device=device, generator=gen).to(fp8.E4M3)
    wq_t = wq.transpose(1, 2).contiguous()
    rows = []
    for role in roles:
        try:
            dense, peer = fp8.dense_fp8_block(role, case, device), "dense_fp8_block"
        except RuntimeError as exc:
            print(f"tune_sm90: no blockwise dense peer ({exc}); per-tensor instead")
            dense, peer = fp8.dense_fp8(role, case, device), "dense_fp8"
        dense_ms = median_ms(timer, dense, args.warmup, args.reps)
        for routing in args.routings:
            splits = make_splits(routing, case.G, case.T)
            xq_t = fp8.columnwise(xq, splits) if role == "wgrad" else None
            dyq_t = fp8.columnwise(dyq, splits) if role == "wgrad" else None
            fn = fp8.block_product(role, case, xq, wq, wq_t, dyq, xq_t, dyq_t, splits, device)
            row = new_row(case, routing, role, dense_ms)
            row["dense"] = peer
            time_kernels(fn, BLOCK_ROLE_PREFIX[role], kernels, row, dense_ms, timer, args)
            rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="tune_sm90.json")
    parser.add_argument("--cases", default="")
    parser.add_argument("--cases-file", default=None,
                        help="throughput cases from this file instead of bench_cases.json")
    parser.add_argument("--roles", default=",".join(ROLES))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--precision", choices=("bf16", "fp8", "fp8_block"), default="bf16")
    parser.add_argument("--tile-orders", default="",
                        help=f"comma-separated, some of {','.join(TILE_ORDERS)}")
    parser.add_argument("--routings", default=",".join(ROUTINGS),
                        help=f"comma-separated, some of {','.join(ALL_ROUTINGS)}")
    parser.add_argument("--kernels", default="",
                        help="comma-separated parts of kernel names: time only those kernels")
    parser.add_argument("--output", choices=tuple(OUTPUTS), default="bf16",
                        help="the fp8 kernels' output dtype (--precision fp8 only)")
    args = parser.parse_args(argv)
    if args.output != "bf16" and args.precision != "fp8":
        print(f"tune_sm90: --output {args.output} is for --precision fp8, got "
              f"{args.precision}", file=sys.stderr)
        return 2
    # Every list is checked before any GPU is looked for.
    known_roles = ROLES + (("wgrad_main_grad",) if args.precision == "fp8" else ())
    lists = {}
    for option, text, allowed, context in (
            ("--roles", args.roles, known_roles, f" for {args.precision}"),
            ("--routings", args.routings, ALL_ROUTINGS, ""),
            ("--tile-orders", args.tile_orders, TILE_ORDERS, "")):
        values = [v for v in text.split(",") if v]
        unknown = [v for v in values if v not in allowed]
        if unknown:
            print(f"tune_sm90: {option}: {unknown} unknown{context}; expected some of "
                  f"{list(allowed)}", file=sys.stderr)
            return 2
        lists[option] = values
    roles, args.routings, args.tile_orders = (lists["--roles"], lists["--routings"],
                                              lists["--tile-orders"])
    try:
        case_file = load_cases(args.cases_file)
    except (OSError, ValueError, KeyError) as e:
        print(f"tune_sm90: --cases-file: {e}", file=sys.stderr)
        return 2
    try:
        cases = select_throughput_cases(case_file, True, csv_list(args.cases))
    except SystemExit as e:  # an unknown name, told before any GPU is looked for
        print(f"tune_sm90: {e} (from {case_file.path})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("tune_sm90: needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    timer = CudaEventTimer(device)
    kernels = select_kernels(ops.kernel_names("cuda", ENGINE),
                             [k for k in args.kernels.split(",") if k])
    records: List[Dict] = []
    measure = {"bf16": measure_bf16_case, "fp8": measure_fp8_case,
               "fp8_block": measure_block_case}[args.precision]
    try:
        for case in cases:
            records.extend(measure(case, roles, kernels, device, timer, args))
            torch.cuda.empty_cache()
    finally:
        ops.set_kernel_override("cuda", ENGINE, "")
        ops.set_tile_order("cuda", ENGINE, "")
        write_diagnostic(args.out, records, precision=args.precision, output=args.output,
                         tile_orders=args.tile_orders or ["automatic"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
