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

Blockwise scales (Float8BlockScaling: E4M3 throughout, 1 x 128 blocks for
activations and gradients, 128 x 128 for weights, float32 scales; random
codes and scales, as the time does not depend on them):
  grouped_linear:fp8_block  our block-scaled kernels, compared with
  dense_fp8_block           torch.nn.functional.scaled_mm (cuBLAS) of the same
                            M, N, K with the same scalings per role: 1 x 128
                            by 128 x 128 (fwd, dgrad), 1 x 128 by 1 x 128
                            (wgrad), where this torch and cuBLAS have them
"""

import sys
import traceback
from typing import Dict, List, Sequence, Tuple

import torch

import grouped_linear
from grouped_linear import ops

from . import peers
from .cases import ThroughputCase, make_splits, splits_summary
from .report import each_case, log, short_error
from .throughput import Settings, time_product

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
GROUP_ALIGN = grouped_linear._C.fp8.GROUP_ALIGN  # group starts of column-wise copies


def quantize(t: torch.Tensor, dtype: torch.dtype):
    """Per-tensor: codes = t * scale (amax to the format's max), scale_inv."""
    fp8_max = torch.finfo(dtype).max
    amax = t.abs().amax().float().clamp(min=1e-12)
    scale = fp8_max / amax
    return (t.float() * scale).clamp(-fp8_max, fp8_max).to(dtype), (1.0 / scale).reshape(1)


def columnwise(codes: torch.Tensor, splits: Sequence[int]) -> torch.Tensor:
    """[T, C] -> [C, P], group g from column sum_{j<g} roundup(m_j, GROUP_ALIGN), zeros between."""
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


def dense_fp8(role: str, case: ThroughputCase, device, fast: bool = False,
              out_dtype: torch.dtype = torch.bfloat16) -> callable:
    """torch._scaled_mm of the role's M x N x K, operands as cuBLAS wants them."""
    m, n, k = {"fwd": (case.T, case.N, case.K), "dgrad": (case.T, case.K, case.N),
               "wgrad": (case.N, case.K, case.T)}[role]
    gen = torch.Generator(device=device).manual_seed(1)
    a = torch.randn(m, k, device=device, generator=gen).to(E4M3)
    b = torch.randn(n, k, device=device, generator=gen).to(E4M3)
    one = torch.ones((), device=device)
    return lambda: torch._scaled_mm(a, b.t(), one, one, out_dtype=out_dtype,
                                    use_fast_accum=fast)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _scales(shape, device, gen) -> torch.Tensor:
    """Positive float32 block scales (their values do not change the time)."""
    return torch.rand(shape, device=device, generator=gen) + 0.5


def dense_fp8_block(role: str, case: ThroughputCase, device) -> callable:
    """torch.nn.functional.scaled_mm of the role's M x N x K with blockwise
    scales: A 1 x 128; B 128 x 128 (a weight: fwd, dgrad) or 1 x 128 (X, wgrad).
    The scale layouts torch accepts are found by trying the candidates."""
    import torch.nn.functional as F
    if not hasattr(F, "scaled_mm"):
        raise RuntimeError(f"torch {torch.__version__} has no torch.nn.functional.scaled_mm")
    m, n, k = {"fwd": (case.T, case.N, case.K), "dgrad": (case.T, case.K, case.N),
               "wgrad": (case.N, case.K, case.T)}[role]
    gen = torch.Generator(device=device).manual_seed(1)
    a = torch.randn(m, k, device=device, generator=gen).to(E4M3)
    b = torch.randn(n, k, device=device, generator=gen).to(E4M3)
    kb, nb = _cdiv(k, 128), _cdiv(n, 128)
    scale_a = _scales((kb, m), device, gen).t()  # one per row and 128 of K, M-major
    if role == "wgrad":
        recipe_b = F.ScalingType.BlockWise1x128
        candidates_b = [_scales((kb, n), device, gen).t(), _scales((n, kb), device, gen),
                        _scales((n, kb), device, gen).t(), _scales((kb, n), device, gen)]
    else:
        recipe_b = F.ScalingType.BlockWise128x128
        # torch 2.11 wants the k blocks padded to a multiple of 4 (K = 768: 8 x nb).
        kb4 = _cdiv(kb, 4) * 4
        candidates_b = [_scales((nb, kb), device, gen).t(), _scales((kb, nb), device, gen),
                        _scales((nb, kb4), device, gen).t(), _scales((kb4, nb), device, gen)]
    errors = []
    for scale_b in candidates_b:
        def fn(scale_b=scale_b):
            return F.scaled_mm(a, b.t(), scale_a, F.ScalingType.BlockWise1x128, scale_b,
                               recipe_b, output_dtype=torch.bfloat16)
        try:
            fn()
            return fn
        except (RuntimeError, ValueError) as exc:
            errors.append(short_error(exc))
    raise RuntimeError("no scale layout accepted: " + "; ".join(errors))


def block_product(role: str, case: ThroughputCase, xq, wq, wq_t, dy_e4m3, xq_t, dy_e4m3_t,
                  splits, device) -> callable:
    """Our block-scaled kernel of `role` on E4M3 codes with random block scales
    in the layouts of core/fp8/fp8_tensor.h (the activations' block-major)."""
    gen = torch.Generator(device=device).manual_seed(2)
    T, K, N, G = case.T, case.K, case.N, case.G
    if role == "fwd":
        sx = _scales((_cdiv(K, 128), T), device, gen)
        sw = _scales((G, _cdiv(N, 128), _cdiv(K, 128)), device, gen)
        return lambda: ops.fp8_forward(xq, sx, wq, sw, None, splits)
    if role == "dgrad":
        sdy = _scales((_cdiv(N, 128), T), device, gen)
        sw_t = _scales((G, _cdiv(K, 128), _cdiv(N, 128)), device, gen)
        return lambda: ops.fp8_dgrad(dy_e4m3, sdy, wq_t, sw_t, splits)
    columns = _cdiv(T, 128) + G  # column-wise 1 x 128 blocks, restarting at each group
    sdy_t, sx_t = _scales((columns, N), device, gen), _scales((columns, K), device, gen)
    return lambda: ops.fp8_wgrad(dy_e4m3_t, sdy_t, xq_t, sx_t, splits, T)


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


class Operands:
    """A case's operands quantized once (per-tensor scales): row-wise X, dY
    (E5M2, and E4M3 for the blockwise and scaled_grouped_mm rows) and each W_g,
    W_g transposed for dgrad."""

    def __init__(self, case: ThroughputCase, device):
        gen = torch.Generator(device=device).manual_seed(0)
        x = torch.randn(case.T, case.K, device=device, generator=gen)
        w = torch.randn(case.G, case.N, case.K, device=device, generator=gen) * 0.02
        dy = torch.randn(case.T, case.N, device=device, generator=gen) * 0.01
        self.xq, self.sx = quantize(x, E4M3)
        self.dyq, self.sdy = quantize(dy, E5M2)
        self.dy_e4m3 = quantize(dy, E4M3)[0]
        del x, dy
        self.wq = torch.empty_like(w, dtype=E4M3)
        self.sw = torch.empty(case.G, device=device)
        for g in range(case.G):  # setup only
            self.wq[g], self.sw[g] = quantize(w[g], E4M3)
        del w
        self.wq_t = self.wq.transpose(1, 2).contiguous()


def per_tensor_product(role: str, case: ThroughputCase, op: Operands, splits, dyq_t, xq_t,
                       split_accumulator: bool = True,
                       out_dtype: torch.dtype = torch.bfloat16) -> callable:
    """Our per-tensor scaled product of `role` (wgrad on the column-wise copies)."""
    if role == "fwd":
        return lambda: ops.fp8_forward(op.xq, op.sx, op.wq, op.sw, None, splits,
                                       out_dtype=out_dtype, split_accumulator=split_accumulator)
    if role == "dgrad":
        return lambda: ops.fp8_dgrad(op.dyq, op.sdy, op.wq_t, op.sw, splits,
                                     out_dtype=out_dtype, split_accumulator=split_accumulator)
    return lambda: ops.fp8_wgrad(dyq_t, op.sdy, xq_t, op.sx, splits, case.T,
                                 out_dtype=out_dtype, split_accumulator=split_accumulator)


def measure_case(case: ThroughputCase, device, timer, settings: Settings) -> List[dict]:
    op = Operands(case, device)
    xq, wq, wq_t, dyq, dy_e4m3 = op.xq, op.wq, op.wq_t, op.dyq, op.dy_e4m3
    flops = case.flops()

    dense: Dict[Tuple[str, bool], dict] = {}
    dense_block: Dict[str, dict] = {}
    for role in settings.roles:
        for fast in (False, True):
            try:
                dense[role, fast] = time_product(timer, dense_fp8(role, case, device, fast),
                                                 settings, flops)
            except Exception as exc:  # noqa: BLE001
                dense[role, fast] = {"error": short_error(exc)}
        try:
            dense_block[role] = time_product(timer, dense_fp8_block(role, case, device),
                                             settings, flops)
        except Exception as exc:  # noqa: BLE001  a peer torch lacks is a result
            dense_block[role] = {"error": "unsupported: " + short_error(exc)}

    records = []
    for routing in settings.routings:
        splits = make_splits(routing, case.G, case.T)
        offs = peers.group_ends(splits, device)
        dyq_t = columnwise(dyq, splits) if "wgrad" in settings.roles else None
        xq_t = columnwise(xq, splits) if "wgrad" in settings.roles else None
        dy_e4m3_t = columnwise(dy_e4m3, splits) if "wgrad" in settings.roles else None
        for role in settings.roles:
            def product(split: bool):
                return per_tensor_product(role, case, op, splits, dyq_t, xq_t, split)
            impls: Dict[str, dict] = {}
            reference = None
            for name, build in (("grouped_linear:fp8", lambda: product(True)),
                                ("grouped_linear:fp8_fast", lambda: product(False)),
                                ("grouped_linear:fp8_block",
                                 lambda: block_product(role, case, xq, wq, wq_t, dy_e4m3, xq_t,
                                                       dy_e4m3_t, splits, device)),
                                ("scaled_grouped_mm",
                                 lambda: scaled_grouped_mm(role, xq, wq, wq_t, dy_e4m3, offs))):
                entry: Dict[str, object] = {}
                try:
                    fn = build()
                    out = fn()
                    timer.synchronize()
                    # Blockwise products use other scales: not compared.
                    entry["check"] = ("reference" if reference is None else
                                      "other scales" if name.endswith("_block") else "shape only")
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
            impls["dense_fp8_block"] = dict(dense_block[role])
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
    """Ratios to dense FP8 of the same accumulation and scaling: *_fast to
    dense_fp8_fast, *_block to dense_fp8_block (none where that did not run)."""
    for name, entry in impls.items():
        base = impls.get("dense_fp8_fast" if name.endswith("_fast") else
                         "dense_fp8_block" if name.endswith("_block") else "dense_fp8", {})
        if base.get("tflops") and "tflops" in entry:
            entry["ratio_to_dense"] = entry["tflops"] / base["tflops"]


def run(cases: Sequence[ThroughputCase], device, timer, settings: Settings) -> List[dict]:
    return each_case(cases, timer,
                     lambda c: f"fp8 throughput {c.name}: G={c.G} K={c.K} N={c.N} T={c.T}",
                     lambda c: measure_case(c, device, timer, settings))


# The output types a per-tensor FP8 GEMM writes besides bf16: fp16, and fp32
# (what a wgrad accumulating into an fp32 main_grad writes).
OUTPUT_TYPES = (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32))


def output_types_case(case: ThroughputCase, routing: str, device, timer,
                      settings: Settings) -> List[dict]:
    """Per role, our promoting per-tensor product into each output type
    (`grouped_linear:fp8@fp16`) against torch._scaled_mm into the same type
    (`dense_fp8@fp16`): one routing, the ratio to the dense peer of that type."""
    op = Operands(case, device)
    splits = make_splits(routing, case.G, case.T)
    wgrad = "wgrad" in settings.roles
    dyq_t = columnwise(op.dyq, splits) if wgrad else None
    xq_t = columnwise(op.xq, splits) if wgrad else None
    flops = case.flops()
    records = []
    for role in settings.roles:
        impls: Dict[str, dict] = {}
        for label, out_dtype in OUTPUT_TYPES:
            for name, build in (
                    (f"grouped_linear:fp8@{label}",
                     lambda: per_tensor_product(role, case, op, splits, dyq_t, xq_t, True,
                                                out_dtype)),
                    (f"dense_fp8@{label}", lambda: dense_fp8(role, case, device, False,
                                                             out_dtype))):
                try:
                    fn = build()
                    out = fn()
                    if out.dtype != out_dtype:
                        raise RuntimeError(f"wrote {out.dtype}, expected {out_dtype}")
                    del out
                    impls[name] = time_product(timer, fn, settings, flops)
                except Exception as exc:  # noqa: BLE001  a failure is a result
                    impls[name] = {"error": short_error(exc)}
                    if name.startswith("grouped"):
                        traceback.print_exc(file=sys.stderr)
            ours, dense = impls[f"grouped_linear:fp8@{label}"], impls[f"dense_fp8@{label}"]
            if "tflops" in ours and dense.get("tflops"):
                ours["ratio_to_dense"] = ours["tflops"] / dense["tflops"]
        # Ours first, then the peers: the table's column order.
        impls = dict(sorted(impls.items(), key=lambda item: item[0].startswith("dense")))
        records.append({"case": case.name, "G": case.G, "K": case.K, "N": case.N, "T": case.T,
                        "routing": routing, "splits": splits_summary(splits), "role": role,
                        "flops": flops, "dtype": "fp8 (e4m3, e5m2 grads)", "impls": impls})
        log(f"  fp8 outputs {case.name:16s} {routing:8s} {role:6s} " + "  ".join(
            f"{n}={r['tflops']:.3g}" if "tflops" in r else f"{n}=n/a" for n, r in impls.items()))
    return records


def run_output_types(cases: Sequence[ThroughputCase], device, timer,
                     settings: Settings) -> List[dict]:
    """output_types_case for each case under one routing (uniform where the run
    has it), which keeps the section short: the routings are compared above."""
    routing = "uniform" if "uniform" in settings.routings else settings.routings[0]
    return each_case(cases, timer, lambda c: f"fp8 output types {c.name} ({routing})",
                     lambda c: output_types_case(c, routing, device, timer, settings))
