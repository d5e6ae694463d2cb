"""The GPU workload scripts/sanitize.sh runs under compute-sanitizer: small
problems through every CUDA engine (forward, dgrad, wgrad with bias and
fused accumulation; host and device m_splits, an empty group), fp32 through
cuBLAS, and the FP8 path of GroupedLinear for every recipe (quantize
kernels, the delayed-scaling update, FP8 GEMMs or their emulation). Inputs
are made on the host and copied, so few torch kernels run; every result is
compared with the CPU engine (bf16 output rounding: relative error < 2e-2).
Exit status 0 when every comparison passed."""

import sys

import torch

import grouped_linear
from grouped_linear import fp8, ops

TOL = 2e-2


def rel(a, b):
    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    den = float(b.norm())
    return float((a - b).norm()) / den if den else float((a - b).norm())


def main() -> int:
    if not (torch.cuda.is_available() and grouped_linear.with_cuda):
        print("sanitize_workload: needs CUDA and a CUDA build of grouped_linear")
        return 2
    failures = []

    def check(what, got, want):
        err = rel(got, want)
        ok = err < TOL and bool(torch.isfinite(got.detach().cpu().float()).all())
        print(f"{'ok  ' if ok else 'FAIL'} {what}: rel err {err:.2e}", flush=True)
        if not ok:
            failures.append(what)

    gen = torch.Generator().manual_seed(0)
    G, T, K, N = 4, 96, 64, 48
    splits = [30, 0, 50, 16]
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(T, K, generator=gen).to(dtype)
        w = (torch.randn(G, N, K, generator=gen) / 8).to(dtype)
        b = torch.randn(G, N, generator=gen).to(dtype)
        dy = torch.randn(T, N, generator=gen).to(dtype)
        want_y = ops.forward(x, w, b, splits)
        want_dx = ops.dgrad(dy, w, splits)
        want_dw, want_db = ops.wgrad(dy, x, splits, bias_grad=True)
        xc, wc, bc, dyc = (t.cuda() for t in (x, w, b, dy))
        for engine in ops.engine_names("cuda"):
            for form in ("host", "device"):
                sp = splits if form == "host" else torch.tensor(splits, device="cuda")
                tag = f"{engine} {str(dtype)[6:]} m_splits on the {form}"
                check(f"forward {tag}", ops.forward(xc, wc, bc, sp, engine=engine), want_y)
                check(f"dgrad {tag}", ops.dgrad(dyc, wc, sp, engine=engine), want_dx)
                dw, db = ops.wgrad(dyc, xc, sp, bias_grad=True, engine=engine)
                check(f"wgrad {tag}", dw, want_dw)
                check(f"bias grad {tag}", db, want_db)
                acc = torch.ones(G, N, K, device="cuda")
                ops.wgrad(dyc, xc, sp, grad_weight=acc, accumulate=True, engine=engine)
                check(f"wgrad accumulate {tag}", acc, want_dw.float() + 1)
        torch.cuda.synchronize()

    # FP8: the module path (quantize kernels, scaling update, FP8 GEMMs).
    recipes = {"delayed": fp8.DelayedScaling(amax_history_len=2),
               "current": fp8.Float8CurrentScaling(),
               "block": fp8.Float8BlockScaling()}
    for name, recipe in recipes.items():
        for k, n in ((64, 48), (40, 24)):  # kernel sizes and the emulated path
            cpu = grouped_linear.GroupedLinear(G, k, n, params_dtype=torch.bfloat16, device="cpu")
            with torch.no_grad():
                cpu.weight.copy_(torch.randn(G, n, k, generator=gen) / 8)
                cpu.bias.copy_(torch.randn(G, n, generator=gen))
            gpu = grouped_linear.GroupedLinear(G, k, n, params_dtype=torch.bfloat16, device="cuda")
            gpu.load_state_dict(cpu.state_dict())
            x = torch.randn(T, k, generator=gen).bfloat16()
            dy = torch.randn(T, n, generator=gen).bfloat16()
            results = []
            for module, dev in ((cpu, "cpu"), (gpu, "cuda")):
                for _ in range(2):  # delayed scaling: the second step uses the first's scales
                    module.zero_grad(set_to_none=True)
                    leaf = x.to(dev, copy=True).requires_grad_(True)
                    with grouped_linear.autocast(recipe=recipe):
                        out = module(leaf, splits)
                    out.backward(dy.to(dev))
                results.append((out, leaf.grad, module.weight.grad, module.bias.grad))
            for what, got, want in zip(("forward", "dgrad", "wgrad", "bias grad"), results[1],
                                       results[0]):
                check(f"FP8 {name} K={k} N={n} {what}", got, want)
        torch.cuda.synchronize()

    print(f"sanitize_workload: {len(failures)} failed comparisons")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
