"""GroupedLinear and Linear under grouped_linear.autocast: FP8 forward,
dgrad and wgrad for every recipe, delayed scaling's step boundary, saved
tensors, the weight cache across micro-batches, checkpoints and bad input.

Tolerances: see fp8_testutil (same dequantized values: conftest.TOLERANCE;
against unquantized values: fp8_bound, from the formats' relative steps)."""

import io
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import grouped_linear
from grouped_linear import fp8
from fp8_testutil import (FP8_FP32_TOLERANCE, amax, assert_finite_rel_le, dequantized_operands,
                          expected_delayed_scale, formats, fp8_bound, splits_like)
from gl_testutil import (assert_close_rel, assert_empty_groups_zero, check_module_healthy,
                         make_splits, randn, ref_dgrad, ref_forward, ref_wgrad, rel_err,
                         rows_for, set_params)

RECIPES = {
    "delayed-hybrid-max": lambda: fp8.DelayedScaling(amax_history_len=4),
    "delayed-e4m3-recent-margin1": lambda: fp8.DelayedScaling(
        fp8_format=fp8.Format.E4M3, margin=1, amax_history_len=3, amax_compute_algo="most_recent"),
    "current-hybrid": lambda: fp8.Float8CurrentScaling(),
    "current-e4m3": lambda: fp8.Float8CurrentScaling(fp8_format=fp8.Format.E4M3),
    "block": lambda: fp8.Float8BlockScaling(),
}
RECIPE_IDS = list(RECIPES)

# (G, T, K, N, dtype, bias, fuse_wgrad_accumulation, m_splits form, split kind).
# K and N are not multiples of 16 or 128 (37, 23, 130, 200: partial 128-blocks
# in both), groups are empty, hold all rows, or span several 128-row blocks.
CASES = [
    (4, 150, 37, 23, torch.float32, True, False, "list", "random_with_zeros"),
    (3, 300, 130, 200, torch.bfloat16, True, False, "tensor", "uniform_random"),
    (5, 97, 24, 37, torch.float32, False, True, "list", "one_group_all"),
    (2, 260, 64, 96, torch.bfloat16, True, True, "tensor", "random_with_zeros"),
    (4, 40, 37, 23, torch.float32, True, False, "list", "all_empty"),
    # Multiples of 16: on an H200 these run the fp16 / fp32-output FP8 kernels.
    (4, 300, 128, 96, torch.float16, True, False, "tensor", "random_with_zeros"),
    (3, 260, 160, 64, torch.float32, True, False, "list", "uniform_random"),
    (2, 200, 64, 128, torch.float16, False, True, "list", "random_with_zeros"),
]
CASE_IDS = [f"G{g}-T{t}-K{k}-N{n}-{str(d)[6:]}{'-bias' if b else ''}{'-main_grad' if f else ''}"
            f"-{form}-{kind}" for g, t, k, n, d, b, f, form, kind in CASES]


def _splits_arg(splits, form, device):
    if form == "list":
        return splits
    return splits_like(splits, "cpu_tensor" if device == "cpu" else "device_tensor", device)


def _run(module, x, splits_arg, dy, recipe, **kwargs):
    """One training step: forward inside autocast, backward after its exit
    (as a training loop does). Returns what the references need."""
    state = module._fp8_state
    x = x.detach().clone().requires_grad_(True)
    scale_fwd = state.scale_fwd.clone() if state.scale_fwd is not None else None
    with grouped_linear.autocast(recipe=recipe):
        out = module(x, splits_arg, **kwargs) if splits_arg is not None else module(x, **kwargs)
    scale_bwd = state.scale_bwd.clone() if state.scale_bwd is not None else None
    out.backward(dy)
    return out, x, scale_fwd, scale_bwd


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("recipe_id", RECIPE_IDS)
def test_grouped_linear_fp8_matches_references(device, recipe_id, case, gen):
    groups, rows, k, n, dtype, bias, fuse, form, kind = case
    recipe = RECIPES[recipe_id]()
    rows = rows_for(kind, rows)
    splits = make_splits(gen, rows, groups, kind)
    module = grouped_linear.GroupedLinear(groups, k, n, bias=bias, params_dtype=dtype,
                                          device=device, fuse_wgrad_accumulation=fuse)
    set_params(module, gen)
    if fuse:
        module.weight.main_grad = torch.zeros(groups, n, k, device=device)
    x = randn(gen, rows, k, dtype=dtype, device=device)
    dy = randn(gen, rows, n, dtype=dtype, device=device)
    arg = _splits_arg(splits, form, device)

    # A first step on the same data gives delayed scaling scales from a
    # history (the scales of the step under test are then exact for it).
    _run(module, x, arg, dy, recipe)
    module.zero_grad(set_to_none=True)
    before = module.weight.main_grad.clone() if fuse else None
    out, x_leaf, scale_fwd, scale_bwd = _run(module, x, arg, dy, recipe)

    q = dequantized_operands(recipe, x, module.weight, dy, splits, scale_fwd, scale_bwd)
    b = module.bias if bias else None
    dw = module.weight.main_grad - before if fuse else module.weight.grad
    dw_dtype = torch.float32 if fuse else dtype
    assert out.dtype == dtype and x_leaf.grad.dtype == dtype
    # 1. The products of the very values the casts produced (float32 outputs
    # within the FP8 kernels' accumulation error, FP8_FP32_TOLERANCE).
    tol = FP8_FP32_TOLERANCE if dtype == torch.float32 else None
    assert_close_rel(out, ref_forward(q["x_row"], q["w"], b, splits),
                     dtype, "forward vs dequantized operands", tol=tol)
    assert_close_rel(x_leaf.grad, ref_dgrad(q["dy_row"], q["w"], splits), dtype,
                     "dgrad vs dequantized operands", tol=tol)
    dw_ref, db_ref = ref_wgrad(q["dy_col"], q["x_col"], splits)
    assert_close_rel(dw, dw_ref, dw_dtype, "wgrad vs dequantized operands",
                     tol=FP8_FP32_TOLERANCE if dw_dtype == torch.float32 else None)
    assert_empty_groups_zero(dw, splits, "wgrad")
    if bias:
        # The bias gradient is summed from the unquantized dY (fused into its cast).
        assert_close_rel(module.bias.grad, ref_wgrad(dy, x, splits)[1], dtype, "bias grad")
        assert_empty_groups_zero(module.bias.grad, splits, "bias grad")
    if fuse:
        assert module.weight.grad is None, "fused accumulation leaves .grad unset"
    # 2. Against the unquantized products, within the formats' precision.
    fwd, bwd = formats(recipe)
    assert_finite_rel_le(rel_err(out, ref_forward(x, module.weight, b, splits)),
                         fp8_bound(fwd, fwd, dtype), "forward vs unquantized")
    assert_finite_rel_le(rel_err(x_leaf.grad, ref_dgrad(dy, module.weight, splits)),
                         fp8_bound(bwd, fwd, dtype), "dgrad vs unquantized")
    assert_finite_rel_le(rel_err(dw, ref_wgrad(dy, x, splits)[0]),
                         fp8_bound(bwd, fwd, dw_dtype), "wgrad vs unquantized")


@pytest.mark.parametrize("recipe_id", RECIPE_IDS)
def test_linear_fp8_matches_references(device, recipe_id, gen):
    recipe = RECIPES[recipe_id]()
    k, n = 37, 23
    module = grouped_linear.Linear(k, n, device=device)
    set_params(module, gen)
    x = randn(gen, 2, 25, k, device=device)  # leading dimensions are flattened
    dy = randn(gen, 2, 25, n, device=device)
    _run(module, x, None, dy, recipe)
    module.zero_grad(set_to_none=True)
    out, x_leaf, scale_fwd, scale_bwd = _run(module, x, None, dy, recipe)
    assert out.shape == (2, 25, n) and x_leaf.grad.shape == x.shape
    splits = [50]
    x2, dy2 = x.reshape(50, k), dy.reshape(50, n)
    q = dequantized_operands(recipe, x2, module.weight.unsqueeze(0), dy2, splits, scale_fwd,
                             scale_bwd)
    assert_close_rel(out.reshape(50, n), ref_forward(q["x_row"], q["w"][0], module.bias, splits),
                     torch.float32, "Linear forward vs dequantized operands")
    assert_close_rel(x_leaf.grad.reshape(50, k), ref_dgrad(q["dy_row"], q["w"], splits),
                     torch.float32, "Linear dgrad vs dequantized operands")
    assert_close_rel(module.weight.grad, ref_wgrad(q["dy_col"], q["x_col"], splits)[0][0],
                     torch.float32, "Linear wgrad vs dequantized operands")
    assert_close_rel(module.bias.grad, dy2.sum(0), torch.float32, "Linear bias grad")


def test_fp8_only_for_the_inputs_that_need_gradients(device, gen):
    """Frozen weight: no wgrad, X is not kept; input without grad: no dgrad."""
    recipe = fp8.Float8CurrentScaling()
    module = grouped_linear.GroupedLinear(3, 20, 12, device=device)
    set_params(module, gen)
    module.weight.requires_grad_(False)
    splits = [5, 0, 9]
    x = randn(gen, 14, 20, device=device).requires_grad_(True)
    with grouped_linear.autocast(recipe=recipe):
        out = module(x, splits)
    out.sum().backward()
    assert x.grad is not None and module.weight.grad is None and module.bias.grad is not None
    # Only the bias needs a gradient: no cast of dY, the plain column sums.
    module.bias.grad = None
    with grouped_linear.autocast(recipe=recipe):
        out = module(x.detach(), splits)
    dy = randn(gen, 14, 12, device=device)
    out.backward(dy)
    assert_close_rel(module.bias.grad, ref_wgrad(dy, x, splits)[1], torch.float32,
                     "bias-only gradient")
    module.weight.requires_grad_(True)
    x2 = x.detach()
    with grouped_linear.autocast(recipe=recipe):
        out = module(x2, splits)
    out.sum().backward()
    assert module.weight.grad is not None
    # Inference under autocast: no graph, FP8 forward.
    with torch.no_grad(), grouped_linear.autocast(recipe=recipe):
        y = module(x2, splits)
    q = dequantized_operands(recipe, x2, module.weight, None, splits)
    assert_close_rel(y, ref_forward(q["x_row"], q["w"], module.bias, splits), torch.float32,
                     "no-grad FP8 forward")


# --- delayed scaling -------------------------------------------------------------

@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_delayed_scaling_step_boundary(device, algo, gen):
    groups, k, n, history = 3, 24, 16, 3
    recipe = fp8.DelayedScaling(amax_history_len=history, amax_compute_algo=algo, margin=1)
    module = grouped_linear.GroupedLinear(groups, k, n, device=device)
    set_params(module, gen)
    state = module._fp8_state
    assert state.amax_history_fwd is None and state.recipe_kind is None
    splits = [7, 0, 5]
    seen = []  # (x amax, per-group weight amax, dy amax) per step
    for step in range(4):
        scale_x = 2.0 ** step    # a different input range every step
        x = randn(gen, 12, k, device=device, scale=scale_x).requires_grad_(True)
        dy = randn(gen, 12, n, device=device, scale=0.5 * (step + 1))
        with grouped_linear.autocast(recipe=recipe):
            out = module(x, splits)
            # Inside the region: this step's amaxes are in row 0, per group for weights.
            row0 = state.amax_history_fwd[0].detach().clone().cpu()
            assert row0[0] == amax(x)
            for g in range(groups):
                assert row0[1 + g] == amax(module.weight[g]), f"weight{g} amax"
            scales_in_region = state.scale_fwd.clone()
        # At the exit: scales from the history, then the history rolled.
        hist_fwd = state.amax_history_fwd.cpu()
        assert torch.all(hist_fwd[0] == 0), "row 0 starts the next step at zero"
        assert torch.equal(hist_fwd[1], row0), "this step's amaxes moved to row 1"
        seen.append(amax(x))
        # The update saw rows 0..H-1 before rolling: this step and H-1 older ones.
        window = seen[-history:]
        x_amaxes = torch.tensor(window)
        expected_x = (x_amaxes.max() if algo == "max" else x_amaxes[-1])
        expected = fp8.format_max("E4M3") / float(expected_x) / 2.0
        assert float(state.scale_fwd[0]) == pytest.approx(expected, rel=1e-6)
        assert not torch.equal(state.scale_fwd.cpu(), scales_in_region.cpu()), \
            "the scales changed at the step boundary"
        assert torch.equal(state.scale_inv_fwd.cpu(), (1.0 / state.scale_fwd).cpu())
        out.backward(dy)
        # Backward ran after the exit: its amax waits in row 0 for the next boundary.
        assert float(state.amax_history_bwd[0, 0]) == amax(dy)
    # The backward set rolled at each later boundary: rows 1.. hold earlier dY amaxes.
    hist_bwd = state.amax_history_bwd.cpu()[:, 0]
    assert hist_bwd[1] > 0 and hist_bwd[0] == amax(dy)


def test_delayed_scaling_scales_follow_the_rule(device, gen):
    """The scales after a boundary are exactly the rule applied to the
    history as it was (checked for both sets and every group)."""
    recipe = fp8.DelayedScaling(amax_history_len=5, margin=2)
    module = grouped_linear.GroupedLinear(4, 16, 8, device=device)
    set_params(module, gen)
    state = module._fp8_state
    splits = [3, 3, 0, 4]
    for step in range(3):
        x = randn(gen, 10, 16, device=device, scale=1.0 + step).requires_grad_(True)
        with grouped_linear.autocast(recipe=recipe):
            out = module(x, splits)
            hist_fwd = state.amax_history_fwd.clone().cpu()
            hist_bwd = state.amax_history_bwd.clone().cpu()
            prev_fwd, prev_bwd = state.scale_fwd.clone().cpu(), state.scale_bwd.clone().cpu()
        assert torch.allclose(state.scale_fwd.cpu(),
                              expected_delayed_scale(hist_fwd, "E4M3", 2, "max", prev_fwd),
                              rtol=1e-6)
        assert torch.allclose(state.scale_bwd.cpu(),
                              expected_delayed_scale(hist_bwd, "E5M2", 2, "max", prev_bwd),
                              rtol=1e-6)
        out.sum().backward()
    assert float(state.scale_bwd[0]) != 1.0, "the gradient scale left its initial value"


def test_delayed_scaling_updates_every_module_at_the_outermost_exit(device, gen):
    recipe = fp8.DelayedScaling(amax_history_len=2)
    a = grouped_linear.GroupedLinear(2, 8, 8, device=device)
    b = grouped_linear.Linear(8, 8, device=device)
    set_params(a, gen)
    set_params(b, gen)
    x = randn(gen, 6, 8, device=device)
    with grouped_linear.autocast(recipe=recipe):
        with grouped_linear.autocast(recipe=recipe):
            h = a(x, [2, 4])
        # An inner exit is no boundary.
        assert float(a._fp8_state.amax_history_fwd[0, 0]) > 0
        assert torch.all(a._fp8_state.scale_fwd == 1)
        b(h)
    for state in (a._fp8_state, b._fp8_state):
        assert torch.all(state.amax_history_fwd[0] == 0)
        assert torch.all(state.amax_history_fwd[1] > 0)
        assert torch.all(state.scale_fwd != 1)


def test_delayed_scaling_check_mode_names_the_tensor(device, gen):
    recipe = fp8.DelayedScaling(amax_history_len=4)
    module = grouped_linear.GroupedLinear(3, 8, 4, device=device)
    set_params(module, gen)
    state = module._fp8_state
    x = randn(gen, 6, 8, device=device)
    with grouped_linear.autocast(recipe=recipe):
        module(x, [2, 2, 2])
    good_scales = state.scale_fwd.clone()
    fp8.set_amax_check(True)
    try:
        with torch.no_grad():
            module.weight[2, 1, 3] = float("nan")
        with pytest.raises(ValueError, match=r"GroupedLinear: amax of weight2 is nan at the FP8 "
                                             r"step boundary.*no scale was updated"):
            with grouped_linear.autocast(recipe=recipe):
                module(x, [2, 2, 2])
        assert torch.equal(state.scale_fwd, good_scales), "a failed check updates nothing"
        assert not fp8.is_enabled(), "the region closed although its boundary raised"
        state.reset()
        set_params(module, gen)
        bad = x.clone()
        bad[4, 0] = float("inf")
        with pytest.raises(ValueError, match="amax of input is inf"):
            with grouped_linear.autocast(recipe=recipe):
                module(bad, [2, 2, 2])
    finally:
        fp8.set_amax_check(False)
    # Without check mode a non-finite amax keeps the previous scale.
    state.reset()
    with grouped_linear.autocast(recipe=recipe):
        module(x, [2, 2, 2])
    kept = state.scale_fwd.clone()
    with grouped_linear.autocast(recipe=recipe):
        module(bad, [2, 2, 2])
    assert float(state.scale_fwd[0]) == float(kept[0]), "an infinite amax became a scale"
    assert torch.equal(state.scale_fwd[1:], kept[1:]), "the weights' scales (same amaxes) moved"
    check_module_healthy(module, gen, num_gemms=3)


def test_current_and_block_scaling_keep_no_history(device, gen):
    module = grouped_linear.GroupedLinear(2, 8, 8, device=device)
    set_params(module, gen)
    for recipe in (fp8.Float8CurrentScaling(), fp8.Float8BlockScaling()):
        with grouped_linear.autocast(recipe=recipe):
            module(randn(gen, 5, 8, device=device), [2, 3])
        assert module._fp8_state.amax_history_fwd is None
        assert module._fp8_state.recipe_kind == recipe.to_native().kind
    assert module.state_dict()["_extra_state"].numel() == 6  # the header only


# --- what backward keeps ------------------------------------------------------------

def _saved_tensors(module, x, splits, recipe):
    saved = []

    def pack(t):
        saved.append((t.dtype, tuple(t.shape), t.element_size(), t.numel()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with grouped_linear.autocast(recipe=recipe):
            out = module(x, splits)
    out.sum().backward()
    return saved


@pytest.mark.parametrize("recipe_id", ["delayed-hybrid-max", "current-hybrid", "block"])
def test_backward_keeps_one_byte_activations(device, recipe_id, gen):
    recipe = RECIPES[recipe_id]()
    groups, rows, k, n = 4, 256, 64, 48
    module = grouped_linear.GroupedLinear(groups, k, n, params_dtype=torch.bfloat16, device=device)
    set_params(module, gen)
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    x = randn(gen, rows, k, dtype=torch.bfloat16, device=device).requires_grad_(True)

    saved = _saved_tensors(module, x, splits, recipe)
    big = [s for s in saved if s[3] >= rows * k // 2 or s[3] >= groups * n * k // 2]
    assert big, "backward saved no activation or weight copy"
    for dtype, shape, size, _ in big:
        assert size == 1 and dtype in (torch.float8_e4m3fn, torch.float8_e5m2), \
            f"saved {dtype} {shape}: expected 1-byte FP8 codes"
    assert (torch.bfloat16, (rows, k), 2, rows * k) not in saved, "the bf16 input was saved"
    codes = sum(s[3] for s in saved if s[2] == 1)
    scales = sum(s[3] * s[2] for s in saved if s[2] != 1)
    # X's column-wise copy (padded per group) and W's column-wise copy; scales are small.
    assert codes <= k * (rows + grouped_linear._C.fp8.GROUP_ALIGN * groups) + groups * n * k
    assert scales <= 4 * (k * (rows // 128 + 1 + groups) + groups * 4), f"{scales} bytes of scales"

    # save_original_input=True keeps the bf16 input instead (quantized in backward) ...
    module_orig = grouped_linear.GroupedLinear(groups, k, n, params_dtype=torch.bfloat16,
                                               device=device, save_original_input=True)
    module_orig.load_state_dict(module.state_dict())
    x2 = x.detach().clone().requires_grad_(True)
    saved = _saved_tensors(module_orig, x2, splits, recipe)
    assert any(s[0] == torch.bfloat16 and s[1] == (rows, k) for s in saved)
    # ... and still computes the same gradients (current/block scaling: the cast
    # in backward gives the same codes; delayed scaling: with the scale as it is then).
    if recipe_id != "delayed-hybrid-max":
        assert torch.equal(module_orig.weight.grad, module.weight.grad)
        assert torch.equal(x2.grad, x.grad)
    else:
        assert_close_rel(module_orig.weight.grad, module.weight.grad, torch.bfloat16,
                         "wgrad with save_original_input", tol=0.15)


@pytest.mark.parametrize("deferred", [False, True], ids=["wgrad-now", "wgrad-deferred"])
def test_saved_copies_share_an_allocation_only_when_they_die_together(device, deferred, gen):
    """X's and W's column-wise copies die with the autograd node, so they are
    carved from one allocation (a trip to the allocator saved per call);
    with delay_wgrad_compute the deferred wgrad keeps X's copy past W's, so
    then each has its own, and W's is freed when backward ends."""
    recipe = fp8.Float8CurrentScaling()
    groups, rows, k, n = 4, 192, 64, 48
    module = grouped_linear.GroupedLinear(groups, k, n, params_dtype=torch.bfloat16,
                                          device=device, delay_wgrad_compute=deferred)
    set_params(module, gen)
    reference = grouped_linear.GroupedLinear(groups, k, n, params_dtype=torch.bfloat16,
                                             device=device)
    reference.load_state_dict(module.state_dict())
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    x = randn(gen, rows, k, dtype=torch.bfloat16, device=device)

    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        with grouped_linear.autocast(recipe=recipe):
            out = module(x.clone().requires_grad_(True), splits)
    codes = [t for t in saved if t.element_size() == 1]
    assert len(codes) == 2, f"expected X's and W's column-wise codes saved, got {len(codes)}"
    storages = {t.untyped_storage().data_ptr() for t in codes}
    assert len(storages) == (2 if deferred else 1)
    saved.clear()  # from here the copies live as long as the graph
    codes.clear()
    out.float().pow(2).sum().backward()
    if deferred:
        module.backward_dw()

    with grouped_linear.autocast(recipe=recipe):
        expected = reference(x.clone().requires_grad_(True), splits)
    expected.float().pow(2).sum().backward()
    assert torch.equal(out, expected)
    # Current scaling casts the same values the same way: the same bits.
    assert torch.equal(module.weight.grad, reference.weight.grad)


# --- weights across micro-batches ----------------------------------------------------

@pytest.mark.parametrize("recipe_id", ["delayed-hybrid-max", "current-e4m3", "block"])
def test_is_first_microbatch_reuses_the_quantized_weight(device, recipe_id, gen):
    recipe = RECIPES[recipe_id]()
    module = grouped_linear.GroupedLinear(3, 40, 24, device=device)
    set_params(module, gen)
    state = module._fp8_state
    splits = [10, 0, 14]
    x = randn(gen, 24, 40, device=device)
    with torch.no_grad(), grouped_linear.autocast(recipe=recipe):
        first = module(x, splits, is_first_microbatch=True)
        assert state.has_weight_cache
        cached = state.cached_weight()
        module.weight.mul_(-3.0)  # an optimizer step the micro-batches must not see
        second = module(x, splits, is_first_microbatch=False)
        assert torch.equal(second, first), "is_first_microbatch=False re-quantized the weight"
        assert torch.equal(state.cached_weight(), cached)
        fresh = module(x, splits)  # None: quantize again, cache dropped
        assert not state.has_weight_cache
        requant = module(x, splits, is_first_microbatch=True)
        assert torch.equal(requant, fresh)
        # False with no cache quantizes (and caches) instead of failing.
        state.drop_weight_cache()
        assert torch.equal(module(x, splits, is_first_microbatch=False), fresh)
        assert state.has_weight_cache
    # `fresh` used the new weights: y - b = -3 (y_first - b), up to quantization.
    bias_rows = module.bias.detach().repeat_interleave(torch.tensor(splits, device=device), 0,
                                                       output_size=24)
    assert_close_rel(fresh - bias_rows, -3.0 * (first - bias_rows), torch.float32,
                     "the re-quantized weights are the new ones",
                     tol=fp8_bound("E4M3", "E4M3", torch.float32))


def test_microbatches_with_gradients_use_the_cache(device, gen):
    """Training micro-batches: the column-wise copy comes from the cache too."""
    recipe = fp8.Float8CurrentScaling()
    module = grouped_linear.GroupedLinear(2, 16, 8, device=device)
    set_params(module, gen)
    splits = [6, 4]
    x = randn(gen, 10, 16, device=device).requires_grad_(True)
    dy = randn(gen, 10, 8, device=device)
    with grouped_linear.autocast(recipe=recipe):
        module(x, splits, is_first_microbatch=True).backward(dy)
    dx_first = x.grad.clone()
    x.grad = None
    with torch.no_grad():
        module.weight.add_(1.0)
    with grouped_linear.autocast(recipe=recipe):
        module(x, splits, is_first_microbatch=False).backward(dy)
    assert torch.equal(x.grad, dx_first), "dgrad did not use the cached weight"


# --- checkpoints ---------------------------------------------------------------------

def test_fp8_state_round_trips_through_checkpoints(device, gen):
    recipe = fp8.DelayedScaling(amax_history_len=6, margin=1, amax_compute_algo="most_recent")
    source = grouped_linear.GroupedLinear(3, 24, 16, device=device)
    set_params(source, gen)
    splits = [5, 0, 7]
    for _ in range(3):
        x = randn(gen, 12, 24, device=device).requires_grad_(True)
        with grouped_linear.autocast(recipe=recipe):
            out = source(x, splits)
        out.sum().backward()
    sd = source.state_dict()
    assert sorted(sd) == ["_extra_state"] + [f"{p}{g}" for p in ("bias", "weight")
                                             for g in range(3)]
    buffer = io.BytesIO()
    torch.save(sd, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True, map_location=device)
    target = grouped_linear.GroupedLinear(3, 24, 16, device=device)
    target.load_state_dict(loaded, strict=True)
    for name in ("amax_history_fwd", "scale_fwd", "scale_inv_fwd", "amax_history_bwd",
                 "scale_bwd"):
        assert torch.equal(getattr(target._fp8_state, name).cpu(),
                           getattr(source._fp8_state, name).cpu()), name
    x = randn(gen, 12, 24, device=device)
    with torch.no_grad(), grouped_linear.autocast(recipe=recipe):
        assert torch.equal(target(x, splits), source(x, splits))
    # A copy is independent of the original.
    import copy
    clone = copy.deepcopy(source)
    assert torch.equal(clone._fp8_state.scale_fwd, source._fp8_state.scale_fwd)
    clone._fp8_state.scale_fwd.mul_(2)
    assert not torch.equal(clone._fp8_state.scale_fwd, source._fp8_state.scale_fwd)


@pytest.mark.parametrize("recipe", [fp8.Float8CurrentScaling(fp8_format=fp8.Format.E4M3),
                                    fp8.Float8CurrentScaling(), fp8.Float8BlockScaling()],
                         ids=["current_e4m3", "current_hybrid", "block"])
def test_state_without_delayed_buffers_saves_as_it_was_saved(device, recipe, gen):
    """A module whose recipe keeps no delayed-scaling buffers saves a header
    only (version, groups, history length 0, format, margin, algorithm); a
    module that loads it saves it again unchanged. (A blockwise module's
    E4M3 came back as a fresh state's HYBRID, so a step replayed from a
    CUDA graph after a load saved another state than its eager twin.)"""
    source = grouped_linear.GroupedLinear(3, 16, 16, device=device)
    set_params(source, gen)
    with grouped_linear.autocast(recipe=recipe):
        source(randn(gen, 12, 16, device=device), [5, 0, 7]).sum().backward()
    saved = source.get_extra_state()
    assert saved.numel() == 6 and saved[2] == 0, "not a header-only state"
    target = grouped_linear.GroupedLinear(3, 16, 16, device=device)
    target.load_state_dict(source.state_dict())
    assert torch.equal(target.get_extra_state().cpu(), saved.cpu())
    assert target._fp8_state.amax_history_fwd is None
    # The loaded module runs the recipe as the source does.
    x = randn(gen, 12, 16, device=device)
    with torch.no_grad(), grouped_linear.autocast(recipe=recipe):
        assert torch.equal(target(x, [5, 0, 7]), source(x, [5, 0, 7]))


def test_loading_fp8_state_writes_into_its_buffers(device, gen):
    """A checkpoint's delayed-scaling state is copied into the module's
    buffers where their shapes match, as load_state_dict copies parameters,
    so that a captured CUDA graph (which holds their addresses) runs with the
    loaded values; a different history length gets new buffers."""
    names = ("amax_history_fwd", "scale_fwd", "scale_inv_fwd", "amax_history_bwd", "scale_bwd",
             "scale_inv_bwd")

    def trained(history_len, steps):
        module = grouped_linear.GroupedLinear(3, 16, 16, device=device)
        set_params(module, gen)
        for _ in range(steps):
            x = randn(gen, 12, 16, device=device, scale=float(steps)).requires_grad_(True)
            with grouped_linear.autocast(recipe=fp8.DelayedScaling(amax_history_len=history_len)):
                out = module(x, [5, 0, 7])
            out.sum().backward()
        return module

    source, target = trained(4, 3), trained(4, 1)
    state = target._fp8_state
    addresses = [getattr(state, n).data_ptr() for n in names]
    assert not torch.equal(state.scale_fwd, source._fp8_state.scale_fwd)
    target.load_state_dict(source.state_dict())
    for name, address in zip(names, addresses):
        assert getattr(state, name).data_ptr() == address, f"{name}: a new buffer"
        assert torch.equal(getattr(state, name), getattr(source._fp8_state, name)), name
    # The values were copied: the source's next step leaves the target as it was.
    loaded = state.scale_fwd.clone()
    with grouped_linear.autocast(recipe=fp8.DelayedScaling(amax_history_len=4)):
        source(randn(gen, 12, 16, device=device, scale=5.0), [5, 0, 7])
    assert not torch.equal(source._fp8_state.scale_fwd, loaded)
    assert torch.equal(state.scale_fwd, loaded)
    # Another history length: the checkpoint's shapes, in new buffers.
    longer = trained(8, 2)
    target.load_state_dict(longer.state_dict())
    assert state.amax_history_fwd.shape == (8, 4)
    for name in names:
        assert torch.equal(getattr(state, name), getattr(longer._fp8_state, name)), name


def test_fp8_state_made_under_inference_mode_takes_checkpoints(device, gen):
    """A first FP8 call under torch.inference_mode makes ordinary buffers (as
    parameters are), so a checkpoint loads into them in place afterwards."""
    source = grouped_linear.GroupedLinear(3, 16, 16, device=device)
    module = grouped_linear.GroupedLinear(3, 16, 16, device=device)
    for m in (source, module):
        set_params(m, gen)
    with grouped_linear.autocast(recipe=fp8.DelayedScaling(amax_history_len=4)):
        source(randn(gen, 12, 16, device=device, scale=3.0), [5, 0, 7])
    with torch.inference_mode(), grouped_linear.autocast(
            recipe=fp8.DelayedScaling(amax_history_len=4)):
        module(randn(gen, 12, 16, device=device), [5, 0, 7])
    history = module._fp8_state.amax_history_fwd
    assert not history.is_inference()
    module.load_state_dict(source.state_dict())
    assert module._fp8_state.amax_history_fwd.data_ptr() == history.data_ptr()
    assert torch.equal(module._fp8_state.scale_fwd, source._fp8_state.scale_fwd)


def test_checkpoint_without_fp8_state_resets_it(device, gen):
    module = grouped_linear.GroupedLinear(2, 8, 8, device=device)
    set_params(module, gen)
    with grouped_linear.autocast():
        module(randn(gen, 4, 8, device=device), [2, 2])
    assert module._fp8_state.amax_history_fwd is not None
    plain = {k: v for k, v in module.state_dict().items() if k != "_extra_state"}
    module.load_state_dict(plain, strict=True)
    assert module._fp8_state.amax_history_fwd is None


def test_bad_extra_state_fails_clearly_and_changes_nothing(device, gen):
    source = grouped_linear.GroupedLinear(3, 8, 8, device=device)
    with grouped_linear.autocast():
        source(randn(gen, 6, 8, device=device), [2, 2, 2])
    target = grouped_linear.GroupedLinear(2, 8, 8, device=device)
    with grouped_linear.autocast():
        target(randn(gen, 6, 8, device=device), [3, 3])
    before = target._fp8_state.scale_fwd.clone()
    with pytest.raises(ValueError, match="_extra_state: saved for 3 groups; this module has "
                                         "num_gemms = 2"):
        target.set_extra_state(source.get_extra_state())
    with pytest.raises(TypeError, match="_extra_state: got dict"):
        target.set_extra_state({"version": 1})
    truncated = source.get_extra_state()[:-1]
    with pytest.raises(ValueError, match="_extra_state: .* values for amax_history_len"):
        source.set_extra_state(truncated)
    assert torch.equal(target._fp8_state.scale_fwd, before)


# --- bad input -----------------------------------------------------------------------

def test_autocast_misuse_is_a_clear_error():
    with pytest.raises(TypeError, match=r"recipe: got the class DelayedScaling \(not an "
                                        r"instance\)"):
        grouped_linear.autocast(recipe=fp8.DelayedScaling)
    with pytest.raises(TypeError, match="recipe: got Format"):
        grouped_linear.autocast(recipe=fp8.Format.E4M3)
    with pytest.raises(TypeError, match="recipe: got str"):
        grouped_linear.autocast(recipe="block")
    with pytest.raises(TypeError, match="enabled: got 'yes'"):
        grouped_linear.autocast(enabled="yes")
    with pytest.raises(TypeError, match="enabled: got 1"):
        fp8.set_amax_check(1)
    assert not fp8.is_enabled()


def _bad_fp8_calls(device, gen):
    module = grouped_linear.GroupedLinear(3, 16, 8, device=device)
    set_params(module, gen)
    x = randn(gen, 9, 16, device=device)
    return module, [
        (lambda: module(x.double(), [3, 3, 3]), TypeError,
         "inp: dtype Double is not supported under FP8 autocast"),
        (lambda: module(x.bfloat16(), [3, 3, 3]), TypeError,
         "mixed dtypes: bias is Float but inp is BFloat16"),
        (lambda: module(x, [3, 3, 4]), ValueError, r"m_splits: sums to 10"),
        (lambda: module(x, [3, 6]), ValueError, "m_splits: has 2 entries"),
        (lambda: module(x[:, :15], [3, 3, 3]), ValueError, "in_features = 16"),
        (lambda: module(x, [3, 3, 3], is_first_microbatch=1), TypeError,
         r"is_first_microbatch: got 1 \(int\); expected None, True or False"),
        (lambda: grouped_linear._C.grouped_linear(x, module.weight, None, [3, 3, 3], None,
                                                  module._config), ValueError,
         "fp8_state: FP8 autocast is on but no module FP8 state was passed"),
    ]


BAD_CALLS = ["float64_input", "mixed_dtypes", "splits_sum", "splits_count", "in_features",
             "is_first_microbatch_int", "no_fp8_state"]


@pytest.mark.parametrize("case", BAD_CALLS)
def test_bad_fp8_call_fails_clearly_and_module_still_works(device, case, gen):
    recipe = fp8.DelayedScaling(amax_history_len=2)
    module, calls = _bad_fp8_calls(device, gen)
    call, exc, pattern = calls[BAD_CALLS.index(case)]
    with grouped_linear.autocast(recipe=recipe):
        module(randn(gen, 9, 16, device=device), [3, 3, 3])  # state exists
    history = module._fp8_state.amax_history_fwd.clone()
    with pytest.raises(exc, match=pattern):
        with grouped_linear.autocast(recipe=recipe):
            call()
    # Checked before the first cast: no amax recorded, the module was not
    # part of the failed region's step, its state is as it was.
    assert torch.equal(module._fp8_state.amax_history_fwd, history)
    assert not fp8.is_enabled()
    # The module works, in FP8 and without.
    x = randn(gen, 9, 16, device=device).requires_grad_(True)
    with grouped_linear.autocast(recipe=recipe):
        out = module(x, [4, 0, 5])
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    check_module_healthy(module, gen, num_gemms=3)


def test_fp8_fused_wgrad_without_main_grad_is_a_clear_error(device, gen):
    module = grouped_linear.GroupedLinear(2, 8, 8, device=device, fuse_wgrad_accumulation=True)
    x = randn(gen, 4, 8, device=device).requires_grad_(True)
    with pytest.raises(ValueError, match="fuse_wgrad_accumulation=True needs weight.main_grad"):
        with grouped_linear.autocast():
            module(x, [2, 2])
    module.weight.main_grad = torch.zeros(2, 8, 8, device=device)
    with grouped_linear.autocast():
        module(x, [2, 2]).sum().backward()
    assert torch.count_nonzero(module.weight.main_grad) > 0


# ---- a forward's two casts: one launch for small calls --------------------------

_CAST_SCRIPT = textwrap.dedent("""
    import torch, grouped_linear as gl
    for groups, rows, n, k in ((128, 16, 256, 256), (8, 64, 4096, 4096)):
        m = gl.GroupedLinear(groups, k, n, bias=False, params_dtype=torch.bfloat16, device="cuda")
        x = torch.randn(groups * rows, k, dtype=torch.bfloat16, device="cuda")
        with torch.no_grad(), gl.autocast(recipe=gl.fp8.DelayedScaling()):
            m(x, [rows] * groups)
    torch.cuda.synchronize()
""")


def test_small_forwards_cast_x_and_w_in_one_launch(cuda_device):
    """The host table's largest call (128 experts of 16 rows, K = N = 256:
    32 input tiles and 512 weight tiles, more than one wave of cast CTAs)
    casts X and W in one launch; a large weight (8 x 4096 x 4096: 8192
    tiles) keeps the two casts' own launches. From the log
    (GROUPED_LINEAR_LOG_LEVEL=info, read once per process: a subprocess)."""
    env = dict(os.environ, GROUPED_LINEAR_LOG_LEVEL="info")
    proc = subprocess.run([sys.executable, "-c", _CAST_SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "FP8 forward casts" in line]
    assert len(lines) == 2, proc.stderr
    assert "X and W in one launch (32 + 512 tiles)" in lines[0], lines
    assert "X and W in two launches (" in lines[1] and " + 8192 tiles)" in lines[1], lines


def _cuda_kernel_names(run):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.parametrize("weight_dtype", [torch.bfloat16, torch.float32])
def test_current_scaling_forward_launches_as_many_kernels_as_delayed(cuda_device, weight_dtype,
                                                                     gen):
    """Current scaling reads X's and W's amax before casting them; on a GPU
    with cooperative launches each cast takes its amax pass in its own launch
    (a grid-wide barrier between them), so a forward costs the launches of
    delayed scaling's (a small call's cost is its launches): X and W in one
    cast, or two for a float32 weight beside a bf16 input (torch.autocast)."""
    module = grouped_linear.GroupedLinear(8, 256, 256, bias=False, params_dtype=weight_dtype,
                                          device=cuda_device)
    set_params(module, gen)
    x = randn(gen, 8 * 16, 256, dtype=torch.bfloat16, device=cuda_device)

    def kernels(recipe):
        # Inside one region, so delayed scaling's step boundary (at its exit)
        # is not profiled; the first call's one-time setup is not either.
        with torch.no_grad(), grouped_linear.autocast(recipe=recipe):
            with torch.autocast("cuda", dtype=torch.bfloat16,
                                enabled=weight_dtype == torch.float32):
                module(x, [16] * 8)
                return _cuda_kernel_names(lambda: module(x, [16] * 8))

    current_names = kernels(fp8.Float8CurrentScaling())
    delayed_names = kernels(fp8.DelayedScaling())
    assert not any("amax_kernel" in n for n in current_names), current_names
    assert len(current_names) == len(delayed_names), (current_names, delayed_names)
    assert len(current_names) == (2 if weight_dtype == torch.bfloat16 else 3), current_names


_NO_COOPERATIVE_SCRIPT = textwrap.dedent("""
    import json, torch, grouped_linear as gl
    from torch.profiler import ProfilerActivity, profile
    m = gl.GroupedLinear(8, 256, 256, bias=False, params_dtype=torch.bfloat16, device="cuda")
    x = torch.randn(8 * 16, 256, dtype=torch.bfloat16, device="cuda")
    with torch.no_grad(), gl.autocast(recipe=gl.fp8.Float8CurrentScaling()):
        reference = m(x, [16] * 8)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out = m(x, [16] * 8)
            torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    print(json.dumps({"names": names, "same": bool(torch.equal(out, reference))}))
""")


@pytest.mark.parametrize("value", ["0", "perhaps"])
def test_cooperative_casts_can_be_turned_off(cuda_device, value):
    """GROUPED_LINEAR_COOPERATIVE_CASTS=0 (read once per process: a
    subprocess) keeps current scaling's amax pass out of the casts: one amax
    launch for X and W, then the cast and the GEMM, the same bits each call;
    the log says which way the casts went. A value that is neither on nor off
    is named in a warning and leaves them on (cast and GEMM only)."""
    env = dict(os.environ, GROUPED_LINEAR_COOPERATIVE_CASTS=value, GROUPED_LINEAR_LOG_LEVEL="info")
    proc = subprocess.run([sys.executable, "-c", _NO_COOPERATIVE_SCRIPT], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["same"]
    names = result["names"]
    if value == "0":
        assert sum("amax_kernel" in n for n in names) == 1, names
        assert len(names) == 3, names
        assert "current scaling's amax in a launch before" in proc.stderr, proc.stderr
    else:
        assert "GROUPED_LINEAR_COOPERATIVE_CASTS='perhaps' is neither on" in proc.stderr
        assert not any("amax_kernel" in n for n in names), names
        assert len(names) == 2, names
        assert "current scaling's amax inside the casts" in proc.stderr, proc.stderr
