"""The sm90 kernels' operand L2 promotion: 128B (CUTLASS's encoding, the
default) against 256B, in one process.

    python -m bench.l2_promotion_ab [--cases a,b] [--roles fwd,dgrad,wgrad]
                                    [--routings uniform,skewed] [--rounds 3]
                                    [--reps 20] [--out l2_promotion_ab.json]

For each case, routing and role it times our per-tensor FP8 GEMM (promoting
and fast accumulation, operands quantized as `python -m bench --sections
fp8` does), our blockwise FP8 GEMM and our bf16 GEMM under each promotion
(ops.set_l2_promotion), the two settings alternating over `--rounds` rounds
so that a drift of the GPU's clocks spreads over both, and the dense GEMMs
of the same M, N, K once (torch._scaled_mm, torch.matmul). Each figure is
the median over the rounds of each round's median time; "speedup" is the
128B time over the 256B time (above 1: 256B is faster), and each setting's
ratio to dense is given beside it (the blockwise GEMM's to per-tensor dense
FP8, whose time does not depend on the scales). Both settings give the same bits
(tests/python/test_sm90_*kernels.py); the first call of each is compared
anyway.
"""

import argparse
import statistics
import sys
from typing import Callable, Dict, List

import torch

from grouped_linear import ops

from .cases import csv_list, load_cases, make_splits, splits_summary
from .fp8_throughput import (Operands, block_product, columnwise, dense_fp8, per_tensor_product)
from .report import log, write_diagnostic
from .throughput import grouped_linear_product
from .timing import CudaEventTimer

ENGINE = "sm90_grouped"
PROMOTIONS = ("128B", "256B")
ROLES = ("fwd", "dgrad", "wgrad")
ROUTINGS = ("uniform", "skewed")
# The benchmark's cases with 32-128 experts (their forward and dgrad stream
# every expert's weight from memory) and one with 8.
DEFAULT_CASES = ("qwen3_30b_fc1", "qwen3_30b_fc2", "dsv3_ep8_fc1", "dsv3_ep8_fc2", "mixtral_fc1")


def dense_bf16(role: str, case, device) -> Callable[[], torch.Tensor]:
    """torch.matmul of the role's M x N x K in bf16."""
    m, n, k = {"fwd": (case.T, case.N, case.K), "dgrad": (case.T, case.K, case.N),
               "wgrad": (case.N, case.K, case.T)}[role]
    a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=device, dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b)


def time_settings(products: Dict[str, Callable[[], object]], timer, args) -> Dict[str, dict]:
    """Each product under each promotion, alternating over the rounds."""
    per_round: Dict[str, Dict[str, List[float]]] = {
        name: {p: [] for p in PROMOTIONS} for name in products}
    first: Dict[str, Dict[str, torch.Tensor]] = {name: {} for name in products}
    for _ in range(args.rounds):
        for promotion in PROMOTIONS:
            ops.set_l2_promotion("cuda", ENGINE, promotion)
            for name, fn in products.items():
                if promotion not in first[name]:
                    out = fn()
                    first[name][promotion] = out[0] if isinstance(out, tuple) else out
                times = timer.per_run_seconds(fn, args.warmup, args.reps)
                per_round[name][promotion].append(statistics.median(times))
    ops.set_l2_promotion("cuda", ENGINE, "")
    results = {}
    for name in products:
        ms = {p: statistics.median(per_round[name][p]) * 1e3 for p in PROMOTIONS}
        results[name] = {"median_ms": ms, "speedup_256B": ms["128B"] / ms["256B"],
                         "same_bits": bool(torch.equal(first[name]["128B"],
                                                       first[name]["256B"]))}
    return results


def measure_case(case, roles, routings, device, timer, args) -> List[dict]:
    op = Operands(case, device)
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(case.T, case.K, device=device, generator=gen).to(torch.bfloat16)
    w = (torch.randn(case.G, case.N, case.K, device=device, generator=gen) * 0.02).to(
        torch.bfloat16)
    dy = (torch.randn(case.T, case.N, device=device, generator=gen) * 0.01).to(torch.bfloat16)
    flops = case.flops()
    dense_ms = {}
    for role in roles:
        dense_ms[role] = {
            name: statistics.median(timer.per_run_seconds(fn, args.warmup, args.reps)) * 1e3
            for name, fn in (("fp8", dense_fp8(role, case, device)),
                             ("fp8_fast", dense_fp8(role, case, device, fast=True)),
                             ("bf16", dense_bf16(role, case, device)))}
    records = []
    for routing in routings:
        splits = make_splits(routing, case.G, case.T)
        xq_t = columnwise(op.xq, splits)
        dyq_t = columnwise(op.dyq, splits)
        dy_e4m3_t = columnwise(op.dy_e4m3, splits)
        for role in roles:
            products = {
                "fp8": per_tensor_product(role, case, op, splits, dyq_t, xq_t, True),
                "fp8_fast": per_tensor_product(role, case, op, splits, dyq_t, xq_t, False),
                "fp8_block": block_product(role, case, op.xq, op.wq, op.wq_t, op.dy_e4m3, xq_t,
                                           dy_e4m3_t, splits, device),
                "bf16": grouped_linear_product(role, ENGINE, x, w, dy, splits),
            }
            results = time_settings(products, timer, args)
            for name, r in results.items():
                base = dense_ms[role]["fp8_fast" if name == "fp8_fast" else
                                      "bf16" if name == "bf16" else "fp8"]
                r["ratio_to_dense"] = {p: base / r["median_ms"][p] for p in PROMOTIONS}
                r["tflops"] = {p: flops / (r["median_ms"][p] * 1e-3) / 1e12 for p in PROMOTIONS}
            records.append({"case": case.name, "G": case.G, "K": case.K, "N": case.N,
                            "T": case.T, "routing": routing, "splits": splits_summary(splits),
                            "role": role, "dense_ms": dense_ms[role], "impls": results})
            log(f"  {case.name:16s} {routing:8s} {role:6s} " + "  ".join(
                f"{n} {r['ratio_to_dense']['128B']:.2f}->{r['ratio_to_dense']['256B']:.2f}"
                f" ({r['speedup_256B']:.3f}x{'' if r['same_bits'] else ', BITS DIFFER'})"
                for n, r in results.items()))
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES))
    parser.add_argument("--roles", default=",".join(ROLES))
    parser.add_argument("--routings", default=",".join(ROUTINGS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", default="l2_promotion_ab.json")
    args = parser.parse_args(argv)
    roles = csv_list(args.roles, ROLES, "l2_promotion_ab: --roles")
    routings = csv_list(args.routings, ROUTINGS, "l2_promotion_ab: --routings")
    if args.rounds < 1 or args.reps < 1 or args.warmup < 0:
        print("l2_promotion_ab: expected --rounds >= 1, --reps >= 1, --warmup >= 0",
              file=sys.stderr)
        return 2
    case_file = load_cases()
    known = {c.name: c for c in case_file.throughput}
    wanted = [c for c in args.cases.split(",") if c]
    unknown = [c for c in wanted if c not in known]
    if unknown:
        print(f"l2_promotion_ab: --cases: {unknown} unknown; expected some of {list(known)}",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0) \
            or ENGINE not in ops.engine_names("cuda"):
        print(f"l2_promotion_ab: needs an sm_90 GPU and the {ENGINE} engine", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    timer = CudaEventTimer(device)
    records: List[dict] = []
    try:
        for name in wanted:
            log(f"l2 promotion A/B {name}")
            records.extend(measure_case(known[name], roles, routings or list(ROUTINGS), device,
                                        timer, args))
            torch.cuda.empty_cache()
    finally:
        ops.set_l2_promotion("cuda", ENGINE, "")
        write_diagnostic(args.out, records, promotions=list(PROMOTIONS), rounds=args.rounds,
                         reps=args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
