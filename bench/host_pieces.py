"""What a host-table call is made of: its parts' host cost, each timed alone, and its kernels' GPU time.

    python -m bench.host_pieces [--groups 8,32,128] [--calls 300] [--out PATH]

The host-overhead section's tiny problems (16 rows per expert, K = N = 256,
bf16), with each part of a GroupedLinear call timed on its own: µs of host
time per call, issuing `calls` calls without synchronising (median of 5
batches, after warm-up), as `python -m bench --sections host` times whole
calls. Parts: torch's own allocation and one torch op; our GEMM call without
autograd (with and without its output allocated); the FP8 GEMM on operands
already quantized; the module's forward without grad (bf16, FP8 delayed
scaling, FP8 with cached weights); torch's autograd floor (a view's
forward+backward); the module's forward+backward (bf16, FP8); dgrad plus
wgrad without autograd. Then the module's calls' GPU time, queued behind a
sleeping kernel so that the GPU sets the pace: where it exceeds the host
time, a host-table loop of those calls measures the GPU, not the host. A diagnostic beside `python -m bench`; on a GPU only.
"""

import argparse
import statistics
import sys
import time

import torch

import grouped_linear
from grouped_linear import ops

from .cases import checked_counts
from .report import write_diagnostic


def host_us(fn, calls: int, batches: int = 5) -> float:
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    per_batch = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_batch.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_batch)


def gpu_us(fn, calls: int = 50) -> float:
    """GPU µs per call with the GPU, not the host, setting the pace: the calls
    are queued behind a sleeping kernel, then run back to back between two
    events (kernels and the device's gaps between them)."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(400_000_000)  # cycles: about 0.2 s, longer than queueing the calls
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1e3


def measure(groups: int, calls: int, device: torch.device) -> dict:
    t, k, n = 16 * groups, 256, 256
    splits = [16] * groups
    gen = torch.Generator(device=device).manual_seed(groups)
    x = torch.randn(t, k, device=device, dtype=torch.bfloat16, generator=gen)
    w = torch.randn(groups, n, k, device=device, dtype=torch.bfloat16, generator=gen)
    dy = torch.randn(t, n, device=device, dtype=torch.bfloat16, generator=gen)
    y = torch.empty(t, n, device=device, dtype=torch.bfloat16)
    xq, wq = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    x_scale_inv, w_scale_inv = torch.ones(1, device=device), torch.ones(groups, device=device)
    host_splits = torch.tensor(splits, dtype=torch.int64)
    module = grouped_linear.GroupedLinear(groups, k, n, bias=False, params_dtype=torch.bfloat16,
                                          device=device)
    x_leaf = x.clone().requires_grad_()
    recipe = grouped_linear.fp8.DelayedScaling()

    def step():
        module(x_leaf, splits).backward(dy)
        x_leaf.grad = None
        module.weight.grad = None

    def floor():
        x_leaf.view_as(x_leaf).backward(dy)
        x_leaf.grad = None

    host = {
        "torch_empty": host_us(lambda: torch.empty(t, n, device=device, dtype=torch.bfloat16),
                               calls),
        "torch_add_": host_us(lambda: y.add_(1), calls),
        "ops_forward_into_out": host_us(lambda: ops.forward(x, w, None, splits, out=y), calls),
        "ops_forward": host_us(lambda: ops.forward(x, w, None, splits), calls),
        "ops_fp8_forward_into_out": host_us(
            lambda: ops.fp8_forward(xq, x_scale_inv, wq, w_scale_inv, None, host_splits, out=y),
            calls),
        "ops_dgrad_plus_wgrad": host_us(
            lambda: (ops.dgrad(dy, w, splits), ops.wgrad(dy, x, splits)), calls),
        "autograd_floor_fwd_bwd": host_us(floor, calls),
        "module_bf16_fwd_bwd": host_us(step, calls),
    }
    gpu = {"module_bf16_fwd_bwd": gpu_us(step)}
    with torch.no_grad():
        host["module_bf16_no_grad"] = host_us(lambda: module(x, splits), calls)
        gpu["module_bf16_no_grad"] = gpu_us(lambda: module(x, splits))
        with grouped_linear.autocast(enabled=True, recipe=recipe):
            host["module_fp8_no_grad"] = host_us(lambda: module(x, splits), calls)
            gpu["module_fp8_no_grad"] = gpu_us(lambda: module(x, splits))
            module(x, splits, is_first_microbatch=True)
            cached = lambda: module(x, splits, is_first_microbatch=False)  # noqa: E731
            host["module_fp8_cached_no_grad"] = host_us(cached, calls)
            gpu["module_fp8_cached_no_grad"] = gpu_us(cached)
    with grouped_linear.autocast(enabled=True, recipe=recipe):
        host["module_fp8_fwd_bwd"] = host_us(step, calls)
        gpu["module_fp8_fwd_bwd"] = gpu_us(step)
    return {"G": groups, "T": t, "K": k, "N": n, "host_us": host, "gpu_us": gpu}


def print_record(record: dict) -> None:
    print(f"G={record['G']}: host us per call")
    for name, us in record["host_us"].items():
        print(f"    {name:28s} {us:8.2f}")
    print(f"G={record['G']}: GPU us per call, the GPU setting the pace")
    for name, us in record["gpu_us"].items():
        print(f"    {name:28s} {us:8.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default="8,32,128")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--out", help="JSON of the figures")
    args = parser.parse_args(argv)
    parsed = checked_counts("bench.host_pieces", lists=[("--groups", args.groups)],
                            counts=[("--calls", args.calls)])
    if parsed is None:
        return 2
    groups = parsed["--groups"]
    if not torch.cuda.is_available():
        print("bench.host_pieces: needs a GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device())
    records = [measure(g, args.calls, device) for g in groups]
    for record in records:
        print_record(record)
    if args.out:
        write_diagnostic(args.out, records, calls=args.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
