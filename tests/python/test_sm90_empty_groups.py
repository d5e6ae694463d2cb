"""Empty groups in the sm90 grouped wgrad kernels (skipped without an sm_90 GPU).

An empty group's weight gradient is zero (or main_grad unchanged). The
kernels first computed it as a product of zeros that every CTA wrote into
the launch's workspace and read back through TMA; twice that read found
the workspace's old bytes in a CTA's first tiles (NaN weight gradients of
empty groups, with freed memory full of NaN-like bytes):
- at e9cf31f, per-tensor and blockwise scales, until the writes were
  fenced at GPU scope (a434732; benchmarks/h200-2026-12-03-e9cf31f-empty-group-probe.txt);
- still under blockwise scales with mostly-empty groups, in a few of every
  thousand steps (scripts/empty_group_probe.py, RELIABILITY.md).
Now empty groups get no GEMM tiles and the kernel's setup stores their
zeros directly (grouped_gemm_sm90.cuh, zero_empty_groups). Repeated calls
on one workspace hide such a bug (the zeros of the last launch are still
there); the module's backward, whose GEMMs and quantize kernels reuse each
other's workspace memory, shows it.

Each case runs 1000 backward steps on the same inputs, freed CUDA memory
filled before each with 0xFF, 0x7F or 0x41 in turn (NaN in every float
format; NaN in E4M3; finite everywhere), and checks every step exactly:
empty groups' weight gradients are zero (or main_grad unchanged),
non-empty groups' equal the first step's bit for bit (the kernels have no
split reductions, so repeats are bitwise equal), and the first step's are
within the recipe's bound of a float64 reference.
"""

import random

import pytest
import torch

import grouped_linear
from grouped_linear import ops

from gl_testutil import ref_wgrad, rel_err

ENGINE = "sm90_grouped"
STEPS = 1000
FILLS = (0xFF, 0x7F, 0x41)
G, K, N = 209, 176, 624


def _sm90_available():
    return (torch.cuda.is_available() and grouped_linear.with_cuda
            and ENGINE in ops.engine_names("cuda")
            and torch.cuda.get_device_capability() == (9, 0))


pytestmark = pytest.mark.skipif(not _sm90_available(), reason="needs an sm_90 GPU and the "
                                f"{ENGINE} engine")


def _splits(layout):
    if layout == "all_empty":
        return [0] * G
    rng = random.Random(425)  # the fuzz case that first showed the race
    splits = [0] * G
    for g in rng.sample(range(G), 6):
        splits[g] = rng.randint(1, 40)
    return splits


def _recipe(name):
    fp8 = grouped_linear.fp8
    return {"none": None, "current": fp8.Float8CurrentScaling(),
            "block": fp8.Float8BlockScaling()}[name]


# Relative (Frobenius) error of the first step's non-empty groups against the
# unquantized float64 reference: bf16 rounding for "none"; for FP8 the
# operands' quantization (E4M3 X, E5M2 dY: 2^-4 and 2^-3 relative per
# element, averaging down over the reduction) bounds it well inside 0.1.
BOUND = {"none": 0.01, "current": 0.1, "block": 0.1}


def _fill_freed_memory(byte):
    junk = [torch.full((1 << 17,), byte, dtype=torch.uint8, device="cuda") for _ in range(8)]
    junk.append(torch.full((64 << 20,), byte, dtype=torch.uint8, device="cuda"))
    del junk


def _run_steps(layout, recipe_name, main_grad):
    splits = _splits(layout)
    gen = torch.Generator().manual_seed(7)
    module = grouped_linear.GroupedLinear(G, K, N, bias=False, params_dtype=torch.bfloat16,
                                          device="cuda", fuse_wgrad_accumulation=main_grad)
    rows = sum(splits)
    x = torch.randn(rows, K, generator=gen).to("cuda", torch.bfloat16)
    dy = torch.randn(rows, N, generator=gen).to("cuda", torch.bfloat16)
    start = torch.randn(G, N, K, generator=gen).cuda() if main_grad else None
    empty = torch.tensor([s == 0 for s in splits], device="cuda")
    recipe = _recipe(recipe_name)
    first = None
    bad_steps = []
    for step in range(STEPS):
        module.zero_grad(set_to_none=True)
        if main_grad:
            module.weight.main_grad = start.clone()
        _fill_freed_memory(FILLS[step % len(FILLS)])
        leaf = x.clone().requires_grad_(True)
        with grouped_linear.autocast(enabled=recipe is not None, recipe=recipe):
            y = module(leaf, torch.tensor(splits))
        y.backward(dy)
        grad = module.weight.main_grad if main_grad else module.weight.grad
        zero_ok = torch.equal(grad[empty], start[empty] if main_grad else
                              torch.zeros_like(grad[empty]))
        if first is None:
            first = grad.clone()
            repeat_ok = True
        else:
            repeat_ok = torch.equal(grad[~empty], first[~empty])
        if not (zero_ok and repeat_ok):
            bad_steps.append(step)
    return splits, x, dy, start, first, bad_steps


def _check(layout, recipe_name, main_grad=False):
    splits, x, dy, start, first, bad_steps = _run_steps(layout, recipe_name, main_grad)
    assert not bad_steps, (
        f"{layout}, recipe {recipe_name}, main_grad={main_grad}: {len(bad_steps)} of {STEPS} "
        f"steps wrote an empty group's weight gradient or changed a non-empty one "
        f"(first steps: {bad_steps[:5]})")
    # The first step's non-empty groups against float64 (for main_grad, the
    # accumulated gradient alone, not main_grad's prior value).
    nonempty = torch.tensor([s > 0 for s in splits])
    if bool(nonempty.any()):
        got = first.cpu().double() - (start.cpu().double() if main_grad else 0.0)
        error = rel_err(got[nonempty], ref_wgrad(dy, x, splits)[0][nonempty])
        assert error < BOUND[recipe_name], (
            f"{layout}, recipe {recipe_name}: relative error {error:.3g} of the non-empty "
            f"groups' weight gradients (bound {BOUND[recipe_name]})")


@pytest.mark.parametrize("recipe_name", ["none", "current", "block"])
@pytest.mark.parametrize("layout", ["mostly_empty", "all_empty"])
def test_empty_groups_stay_zero(layout, recipe_name):
    _check(layout, recipe_name)


def _e5m2_wgrad_kernels():
    if not _sm90_available():
        return ["none"]
    return [k for k in ops.kernel_names("cuda", ENGINE)
            if k.startswith("wgrad_e5m2_bf16_") and "_block_" not in k] or ["none"]


@pytest.mark.parametrize("kernel", _e5m2_wgrad_kernels())
def test_every_e5m2_wgrad_kernel(kernel):
    """Every per-tensor E5M2 wgrad kernel, candidates for tuning included,
    forced by name (the other roles choose as usual)."""
    ops.set_kernel_override("cuda", ENGINE, kernel)
    try:
        _check("mostly_empty", "current")
    finally:
        ops.set_kernel_override("cuda", ENGINE, "")


@pytest.mark.parametrize("recipe_name", ["none", "current"])
def test_main_grad_accumulation(recipe_name):
    """Accumulating into main_grad: the kernels that read C (D = acc + C),
    where an empty group must leave main_grad exactly as it was."""
    _check("mostly_empty", recipe_name, main_grad=True)
