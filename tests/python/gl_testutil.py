"""Helpers of the grouped_linear tests: random data, float64 references, checks."""

import math
from typing import List, Optional, Sequence

import torch

from conftest import TOLERANCE

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["fp32", "fp16", "bf16"]

# (num_gemms, rows, in_features K, out_features N): K and N include values
# that are not multiples of 8 (37, 23, 5, 1) and a single-row-per-expert case.
SHAPES = [
    (1, 64, 16, 8),
    (4, 150, 37, 23),
    (8, 200, 96, 40),
    (3, 33, 5, 1),
    (6, 97, 24, 37),
    (2, 260, 64, 96),
]
SHAPE_IDS = [f"G{g}-T{t}-K{k}-N{n}" for g, t, k, n in SHAPES]

# How rows are spread over the groups.
#   random_with_zeros: random sizes, about a third of the groups empty
#   one_group_all:     one random group holds every row, the others are empty
#   uniform_random:    random sizes, usually all non-empty
#   all_empty:         no rows at all (T = 0)
SPLIT_KINDS = ["random_with_zeros", "one_group_all", "uniform_random", "all_empty"]


def make_splits(gen: torch.Generator, rows: int, groups: int, kind: str) -> List[int]:
    if kind == "all_empty":
        return [0] * groups
    if kind == "one_group_all":
        g = int(torch.randint(groups, (1,), generator=gen))
        return [rows if i == g else 0 for i in range(groups)]
    weights = torch.rand(groups, generator=gen, dtype=torch.float64) + 0.05
    if kind == "random_with_zeros" and groups > 1:
        empty = torch.randperm(groups, generator=gen)[: max(1, groups // 3)]
        weights[empty] = 0.0
    elif kind != "uniform_random" and kind != "random_with_zeros":
        raise ValueError(kind)
    sizes = torch.floor(weights / weights.sum() * rows).long()
    sizes[int(torch.argmax(weights))] += rows - int(sizes.sum())
    out = [int(s) for s in sizes]
    assert sum(out) == rows and all(s >= 0 for s in out)
    return out


def rows_for(kind: str, rows: int) -> int:
    return 0 if kind == "all_empty" else rows


def randn(gen: torch.Generator, *shape, dtype=torch.float32, device="cpu", scale: float = 1.0):
    """Standard normal values in `dtype` (never zeros: a zero input hides
    unwritten or mis-addressed memory)."""
    t = torch.randn(*shape, generator=gen, dtype=torch.float32) * scale
    return t.to(dtype=dtype, device=device)


def ref_forward(x, weight, bias, splits: Sequence[int]) -> torch.Tensor:
    """float64 reference of y_g = x_g w_g^T + b_g, on the CPU, from the given values."""
    x64 = x.detach().reshape(-1, x.shape[-1]).to("cpu", torch.float64)
    w64 = weight.detach().to("cpu", torch.float64)
    if w64.dim() == 2:
        w64 = w64.unsqueeze(0)
    b64 = None
    if bias is not None:
        b64 = bias.detach().to("cpu", torch.float64)
        if b64.dim() == 1:
            b64 = b64.unsqueeze(0)
    out = torch.empty(x64.shape[0], w64.shape[1], dtype=torch.float64)
    row = 0
    for g, m in enumerate(splits):
        y = x64[row:row + m] @ w64[g].T
        if b64 is not None:
            y = y + b64[g]
        out[row:row + m] = y
        row += m
    return out.reshape(*x.shape[:-1], w64.shape[1])


def ref_dgrad(dy, weight, splits):
    dy64 = dy.detach().reshape(-1, dy.shape[-1]).to("cpu", torch.float64)
    w64 = weight.detach().to("cpu", torch.float64)
    if w64.dim() == 2:
        w64 = w64.unsqueeze(0)
    out = torch.empty(dy64.shape[0], w64.shape[2], dtype=torch.float64)
    row = 0
    for g, m in enumerate(splits):
        out[row:row + m] = dy64[row:row + m] @ w64[g]
        row += m
    return out


def ref_wgrad(dy, x, splits):
    dy64 = dy.detach().reshape(-1, dy.shape[-1]).to("cpu", torch.float64)
    x64 = x.detach().reshape(-1, x.shape[-1]).to("cpu", torch.float64)
    groups = len(splits)
    dw = torch.zeros(groups, dy64.shape[1], x64.shape[1], dtype=torch.float64)
    db = torch.zeros(groups, dy64.shape[1], dtype=torch.float64)
    row = 0
    for g, m in enumerate(splits):
        dw[g] = dy64[row:row + m].T @ x64[row:row + m]
        db[g] = dy64[row:row + m].sum(0)
        row += m
    return dw, db


def rel_err(actual: torch.Tensor, ref: torch.Tensor) -> float:
    a = actual.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    assert a.shape == r.shape, f"shape {tuple(a.shape)} != reference {tuple(r.shape)}"
    finite = torch.isfinite(a)
    if not finite.all():
        bad = (~finite).nonzero()
        where = ", ".join(str(tuple(i.tolist())) for i in bad[:6])
        lead = ""
        if a.dim() == 3:  # [G, N, K] gradients: which groups hold them
            groups = sorted(set(bad[:, 0].tolist()))
            lead = f"; in groups {groups[:12]}{' ...' if len(groups) > 12 else ''}"
        raise AssertionError(f"{bad.shape[0]} of {a.numel()} values non-finite (unwritten or "
                             f"NaN-poisoned elements?), first at {where}{lead}")
    ref_norm = float(torch.linalg.vector_norm(r))
    diff_norm = float(torch.linalg.vector_norm(a - r))
    if ref_norm == 0.0:
        return 0.0 if diff_norm == 0.0 else math.inf
    return diff_norm / ref_norm


def assert_close_rel(actual, ref, dtype, what: str, tol: Optional[float] = None):
    tol = TOLERANCE[dtype] if tol is None else tol
    err = rel_err(actual, ref)
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e} ({dtype})"


def assert_empty_groups_zero(grad, splits, what: str):
    """Zero-size groups must give exactly zero weight / bias gradients."""
    for g, m in enumerate(splits):
        if m == 0:
            assert torch.count_nonzero(grad[g]) == 0, f"{what}[{g}] (empty group) is not zero"


def set_params(module, gen, scale_bias: float = 0.5):
    """Random unit-scale parameters (default init has tiny weights and zero bias)."""
    with torch.no_grad():
        w = module.weight
        k = w.shape[-1]
        w.copy_(randn(gen, *w.shape, scale=1.0 / math.sqrt(k)))
        if module.bias is not None:
            module.bias.copy_(randn(gen, *module.bias.shape, scale=scale_bias))


def snapshot(*tensors):
    return [None if t is None else t.detach().clone() for t in tensors]


def assert_unchanged(before, after, what: str):
    for i, (b, a) in enumerate(zip(before, after)):
        if b is None:
            assert a is None, f"{what}[{i}] was None and is now set"
            continue
        assert torch.equal(b, a.detach()) or (
            torch.isnan(b).all() and torch.isnan(a).all()), f"{what}[{i}] was modified"


def check_module_healthy(module, gen, num_gemms: Optional[int] = None):
    """A correct forward + backward on `module` after a failing call: matches
    the float64 reference."""
    weight = module.weight
    weight.grad = None
    if module.bias is not None:
        module.bias.grad = None
    device = weight.device
    dtype = weight.dtype
    k = module.in_features
    rows = 13
    grouped = num_gemms is not None
    splits = make_splits(gen, rows, num_gemms, "uniform_random") if grouped else [rows]
    x = randn(gen, rows, k, dtype=dtype, device=device).requires_grad_(True)
    out = module(x, splits) if grouped else module(x)
    if isinstance(out, tuple):
        out = out[0]
    bias = None if getattr(module, "return_bias", False) else module.bias
    assert_close_rel(out, ref_forward(x, weight, bias, splits), dtype, "healthy forward")
    dy = randn(gen, *out.shape, dtype=dtype, device=device)
    main_grad = getattr(weight, "main_grad", None)
    before = main_grad.detach().clone() if main_grad is not None else None
    out.backward(dy)
    assert_close_rel(x.grad, ref_dgrad(dy, weight, splits), dtype, "healthy dgrad")
    dw_ref, _ = ref_wgrad(dy, x, splits)
    if not grouped:
        dw_ref = dw_ref[0]
    if module.fuse_wgrad_accumulation and main_grad is not None:
        assert weight.grad is None
        assert_close_rel(main_grad - before, dw_ref, torch.float32, "healthy main_grad increment",
                         tol=max(TOLERANCE[dtype], 3e-4))  # FP8: fp8_testutil.FP8_FP32_TOLERANCE
    else:
        assert_close_rel(weight.grad, dw_ref, dtype, "healthy wgrad")


def make_grouped(device, dtype, groups, k, n, gen=None, **kwargs):
    """A GroupedLinear with random (seeded) parameters when `gen` is given."""
    import grouped_linear
    module = grouped_linear.GroupedLinear(groups, k, n, params_dtype=dtype, device=device, **kwargs)
    if gen is not None:
        set_params(module, gen)
    return module


def forward_backward(module, x, splits, dy):
    """forward + backward; returns (out, grad_input, grad_weight, grad_bias)."""
    module.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    out = module(x, splits) if splits is not None else module(x)
    out.backward(dy)
    bias_grad = module.bias.grad if module.bias is not None else None
    return out.detach(), x.grad, module.weight.grad, bias_grad
