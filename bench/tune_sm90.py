"""Measure every built kernel of the sm90_grouped engine on the benchmark's
throughput cases, to choose the tile configuration per role and problem.

    python -m bench.tune_sm90 [--out tune.json] [--cases a,b] [--roles fwd,wgrad]

Build with the candidates first: `GL_SM90_TUNING=1 scripts/setup.sh` (CMake
option GL_SM90_TUNING=ON). bf16 kernels only (fp16 runs the same tiles).
Each figure is the median of CUDA-event timed runs, as a ratio to a dense
GEMM of the same M, N, K measured in the same process.
"""

import argparse
import json
import statistics
import sys
from typing import Dict, List

import torch

from grouped_linear import ops

from . import peers
from .cases import ROLES, ROUTINGS, load_cases, make_splits
from .throughput import DY_SCALE, W_SCALE, X_SCALE, grouped_linear_product, relative_error
from .timing import CudaEventTimer

ENGINE = "sm90_grouped"
ROLE_PREFIX = {"fwd": "forward_bf16_", "dgrad": "dgrad_bf16_", "wgrad": "wgrad_bf16_"}


def median_ms(timer: CudaEventTimer, fn, warmup: int, reps: int) -> float:
    return statistics.median(timer.per_run_seconds(fn, warmup, reps)) * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="tune_sm90.json")
    parser.add_argument("--cases", default="")
    parser.add_argument("--roles", default=",".join(ROLES))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("tune_sm90: needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    timer = CudaEventTimer(device)
    kernels = ops.kernel_names("cuda", ENGINE)
    case_file = load_cases()
    wanted = [c for c in args.cases.split(",") if c]
    cases = [c for c in case_file.throughput if not wanted or c.name in wanted]
    roles = [r for r in args.roles.split(",") if r]
    records: List[Dict] = []
    try:
        for case in cases:
            gen = torch.Generator(device=device).manual_seed(0)
            x = torch.randn(case.T, case.K, dtype=torch.bfloat16, device=device, generator=gen) * X_SCALE
            w = torch.randn(case.G, case.N, case.K, dtype=torch.bfloat16, device=device,
                            generator=gen) * W_SCALE
            dy = torch.randn(case.T, case.N, dtype=torch.bfloat16, device=device,
                             generator=gen) * DY_SCALE
            for role in roles:
                dense_ms = median_ms(timer, peers.dense_product(role, x, w, dy), args.warmup, args.reps)
                for routing in ROUTINGS:
                    splits = make_splits(routing, case.G, case.T)
                    ops.set_kernel_override("cuda", ENGINE, "")
                    fn = grouped_linear_product(role, ENGINE, x, w, dy, splits)
                    reference = fn()
                    row = {"case": case.name, "routing": routing, "role": role, "G": case.G,
                           "K": case.K, "N": case.N, "T": case.T, "dense_ms": dense_ms,
                           "kernels": {}}
                    for name in kernels:
                        if not name.startswith(ROLE_PREFIX[role]) or "_to_fp32_" in name:
                            continue
                        ops.set_kernel_override("cuda", ENGINE, name)
                        got = fn()
                        err = relative_error(got, reference)
                        del got
                        ms = median_ms(timer, fn, args.warmup, args.reps)
                        row["kernels"][name] = {"ms": ms, "ratio_to_dense": dense_ms / ms,
                                                "rel_err_vs_default": err}
                    ops.set_kernel_override("cuda", ENGINE, "")
                    del reference
                    records.append(row)
                    best = max(row["kernels"].items(), key=lambda kv: kv[1]["ratio_to_dense"])
                    print(f"{case.name:16s} {routing:8s} {role:6s} " + "  ".join(
                        f"{n[len(ROLE_PREFIX[role]):]}={r['ratio_to_dense']:.2f}"
                        for n, r in row["kernels"].items()) + f"   best {best[0]}", flush=True)
            del x, w, dy
            torch.cuda.empty_cache()
    finally:
        ops.set_kernel_override("cuda", ENGINE, "")
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
