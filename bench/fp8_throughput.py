"""FP8 GEMM throughput per case, routing and role, against dense FP8.

Operands are quantized once before timing (per-tensor scales, as delayed and
current scaling use): E4M3 activations and weights, E5M2 gradients (the
HYBRID format). Each role reads the copy of an operand laid out for it
(core/fp8/fp8_tensor.h): row-wise X and dY, each W_g transposed for dgrad,
and the group-aligned column-wise dYᵀ and Xᵀ for wgrad. The quantization
itself is not timed here (the end-to-end module figures include it).

Ours: grouped_linear:fp8 promotes the tensor core's partial sums into fp32
(use_split_accumulator=True: Transformer Engine's choice for dgrad and wgrad,
this library's for the forward too unless the recipe says otherwise);
grouped_linear:fp8_fast allows fast accumulation (use_split_accumulator=
False: TE's default for the forward; roles without a fast kernel run the
promoting one).

Peers, in the same process:
  dense_fp8           torch._scaled_mm (cuBLAS) of the same M, N, K, per-tensor
                      scales, bf16 output: the denominator of grouped_linear:fp8
  dense_fp8_fast      the same with use_fast_accum=True: the denominator of
                      grouped_linear:fp8_fast, so each ratio compares like
                      accumulation with like
  scaled_grouped_mm   torch._scaled_grouped_mm, row-wise scales (where this
                      torch has it; wgrad is not run, it takes no column-wise
                      per-group layout)
"""

import statistics
import sys
import traceback
from typing import Dict, List, Sequence, Tuple

import torch

from grouped_linear import ops

from . import peers
from .cases import ThroughputCase, make_splits, splits_summary
from .report import log, short_error
from .throughput import Settings, add_ratios, check_against, time_product

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
GROUP_ALIGN = 16


def quantize(t: torch.Tensor, dtype: torch.dtype):
    """Per-tensor: codes = t * scale (amax to the format's max), scale_inv."""
    fp8_max = torch.finfo(dtype).max
    amax = t.abs().amax().float().clamp(min=1e-12)
    scale = fp8_max / amax
    return (t.float() * scale).clamp(-fp8_max, fp8_max).to(dtype), (1.0 / scale).reshape(1)


def columnwise(codes: torch.Tensor, splits: Sequence[int]) -> torch.Tensor:
    """[T, C] -> [C, P], group g from column sum_{j<g} roundup(m_j, 16), zeros between."""
    groups, rows = len(splits), codes.shape[0]
    width = -(-(rows + (GROUP_ALIGN - 1) * groups) // GROUP_ALIGN) * GROUP_ALIGN
    out = torch.zeros(codes.shape[1], width, dtype=torch.uint8, device=codes.device)
    src = codes.view(torch.uint8)
    index = torch.empty(rows, dtype=torch.long)
    row = col = 0
    for m in splits:
        index[row:row + m] = torch.arange(col, col + m)
        row += m
        col += -(-m // GROUP_ALIGN) * GROUP_ALIGN
    out[:, index.to(codes.device)] = src.t()
    return out.view(codes.dtype)


def dense_fp8(role: str, case: ThroughputCase, device, fast: bool = False) -> callable:
    """torch._scaled_mm of the role's M x N x K, operands as cuBLAS wants them."""
    m, n, k = {"fwd": (case.T, case.N, case.K), "dgrad": (case.T, case.K, case.N),
               "wgrad": (case.N, case.K, case.T)}[role]
    gen = torch.Generator(device=device).manual_seed(1)
    a = torch.randn(m, k, device=device, generator=gen).to(E4M3)
    b = torch.randn(n, k, device=device, generator=gen).to(E4M3)
    one = torch.ones((), device=device)
    return lambda: torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16,
                                    use_fast_accum=fast)


def scaled_grouped_mm(role: str, xq, wq, wq_t, dy_e4m3, offs):
    """torch._scaled_grouped_mm (E4M3 only, row-wise scales of ones): A [T, K]
    row-major by B [G, K, N] with K contiguous per group."""
    if not hasattr(torch, "_scaled_grouped_mm"):
        raise RuntimeError(f"torch {torch.__version__} has no torch._scaled_grouped_mm")
    if role == "wgrad":
        raise RuntimeError("not measured for wgrad")
    a, b = (xq, wq.transpose(-2, -1)) if role == "fwd" else (dy_e4m3, wq_t.transpose(-2, -1))
    sa = torch.ones(a.shape[0], device=a.device)
    sb = torch.ones(b.shape[0], b.shape[-1], device=a.device)
    return lambda: torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16)


def measure_case(case: ThroughputCase, device, timer, settings: Settings) -> List[dict]:
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(case.T, case.K, device=device, generator=gen)
    w = torch.randn(case.G, case.N, case.K, device=device, generator=gen) * 0.02
    dy = torch.randn(case.T, case.N, device=device, generator=gen) * 0.01
    xq, sx = quantize(x, E4M3)
    dyq, sdy = quantize(dy, E5M2)
    dy_e4m3 = quantize(dy, E4M3)[0] if "dgrad" in settings.roles else None
    del x, dy
    wq = torch.empty_like(w, dtype=E4M3)
    sw = torch.empty(case.G, device=device)
    for g in range(case.G):  # setup only
        wq[g], sw[g] = quantize(w[g], E4M3)
    del w
    wq_t = wq.transpose(1, 2).contiguous()
    flops = case.flops()

    dense: Dict[Tuple[str, bool], dict] = {}
    for role in settings.roles:
        for fast in (False, True):
            try:
                dense[role, fast] = time_product(timer, dense_fp8(role, case, device, fast),
                                                 settings, flops)
            except Exception as exc:  # noqa: BLE001
                dense[role, fast] = {"error": short_error(exc)}

    records = []
    for routing in settings.routings:
        splits = make_splits(routing, case.G, case.T)
        offs = peers.group_ends(splits, device)
        dyq_t = columnwise(dyq, splits) if "wgrad" in settings.roles else None
        xq_t = columnwise(xq, splits) if "wgrad" in settings.roles else None
        for role in settings.roles:
            def product(split: bool):
                return {
                    "fwd": lambda: ops.fp8_forward(xq, sx, wq, sw, None, splits,
                                                   split_accumulator=split),
                    "dgrad": lambda: ops.fp8_dgrad(dyq, sdy, wq_t, sw, splits,
                                                   split_accumulator=split),
                    "wgrad": lambda: ops.fp8_wgrad(dyq_t, sdy, xq_t, sx, splits, case.T,
                                                   split_accumulator=split),
                }[role]
            impls: Dict[str, dict] = {}
            reference = None
            for name, build in (("grouped_linear:fp8", lambda: product(True)),
                                ("grouped_linear:fp8_fast", lambda: product(False)),
                                ("scaled_grouped_mm",
                                 lambda: scaled_grouped_mm(role, xq, wq, wq_t, dy_e4m3, offs))):
                entry: Dict[str, object] = {}
                try:
                    fn = build()
                    out = fn()
                    timer.synchronize()
                    entry["check"] = "reference" if reference is None else "shape only"
                    if reference is None:
                        reference = out
                    del out
                    entry.update(time_product(timer, fn, settings, flops))
                except Exception as exc:  # noqa: BLE001
                    entry["error"] = ("error: " if name.startswith("grouped") else "unsupported: ") \
                        + short_error(exc)
                    if name.startswith("grouped"):
                        traceback.print_exc(file=sys.stderr)
                impls[name] = entry
            impls["dense_fp8"] = dict(dense[role, False])
            impls["dense_fp8_fast"] = dict(dense[role, True])
            add_ratios_fp8(impls)
            records.append({"case": case.name, "G": case.G, "K": case.K, "N": case.N,
                            "T": case.T, "routing": routing, "splits": splits_summary(splits),
                            "role": role, "flops": flops, "dtype": "fp8 (e4m3, e5m2 grads)",
                            "impls": impls})
            log(f"  fp8 {case.name:16s} {routing:8s} {role:6s} " + "  ".join(
                f"{n}={r['tflops']:.3g}" if "tflops" in r else f"{n}=n/a"
                for n, r in impls.items()))
            reference = None
    return records


def add_ratios_fp8(impls: Dict[str, dict]) -> None:
    """Ratios to dense FP8 of the same accumulation: *_fast to dense_fp8_fast."""
    for name, entry in impls.items():
        base = impls.get("dense_fp8_fast" if name.endswith("_fast") else "dense_fp8", {})
        if base.get("tflops") and "tflops" in entry:
            entry["ratio_to_dense"] = entry["tflops"] / base["tflops"]


def run(cases: Sequence[ThroughputCase], device, timer, settings: Settings) -> List[dict]:
    records: List[dict] = []
    for case in cases:
        log(f"fp8 throughput {case.name}: G={case.G} K={case.K} N={case.N} T={case.T}")
        try:
            records.extend(measure_case(case, device, timer, settings))
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)
            records.append({"case": case.name, "error": short_error(exc)})
        timer.synchronize()
        torch.cuda.empty_cache()
    return records
