"""Numerics of GroupedLinear and of the raw products (grouped_linear.ops)
against a float64 reference of the per-expert linear."""

import pytest
import torch

import grouped_linear
from grouped_linear import ops

from gl_testutil import (DTYPE_IDS, DTYPES, SHAPE_IDS, SHAPES, SPLIT_KINDS, assert_close_rel,
                         assert_empty_groups_zero, make_splits, randn, ref_dgrad, ref_forward,
                         ref_wgrad, rows_for, set_params)

QUANTITIES = ["out", "grad_input", "grad_weight", "grad_bias"]


@pytest.mark.parametrize("quantity", QUANTITIES)
@pytest.mark.parametrize("kind", SPLIT_KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_grouped_linear_forward_backward(device, dtype, shape, kind, quantity, gen):
    groups, rows, k, n = shape
    rows = rows_for(kind, rows)
    splits = make_splits(gen, rows, groups, kind)
    module = grouped_linear.GroupedLinear(groups, k, n, params_dtype=dtype, device=device)
    set_params(module, gen)
    x = randn(gen, rows, k, dtype=dtype, device=device).requires_grad_(True)
    dy = randn(gen, rows, n, dtype=dtype, device=device)

    out = module(x, splits)
    assert out.dtype == dtype and out.device.type == device and out.shape == (rows, n)
    if quantity == "out":
        assert_close_rel(out, ref_forward(x, module.weight, module.bias, splits), dtype, "out")
        return
    out.backward(dy)
    if quantity == "grad_input":
        assert x.grad.dtype == dtype and x.grad.shape == x.shape
        assert_close_rel(x.grad, ref_dgrad(dy, module.weight, splits), dtype, "grad_input")
        return
    dw_ref, db_ref = ref_wgrad(dy, x, splits)
    if quantity == "grad_weight":
        grad = module.weight.grad
        assert grad.dtype == dtype and grad.shape == module.weight.shape
        assert_close_rel(grad, dw_ref, dtype, "grad_weight")
        assert_empty_groups_zero(grad, splits, "grad_weight")
    else:
        grad = module.bias.grad
        assert grad.dtype == dtype and grad.shape == module.bias.shape
        assert_close_rel(grad, db_ref, dtype, "grad_bias")
        assert_empty_groups_zero(grad, splits, "grad_bias")


# --- raw products with NaN-poisoned output buffers -------------------------

OPS_SHAPES = SHAPES[1:4]
OPS_SHAPE_IDS = SHAPE_IDS[1:4]
OPS_KINDS = ["random_with_zeros", "one_group_all", "all_empty"]


def _operands(gen, device, dtype, shape, kind):
    groups, rows, k, n = shape
    rows = rows_for(kind, rows)
    splits = make_splits(gen, rows, groups, kind)
    x = randn(gen, rows, k, dtype=dtype, device=device)
    w = randn(gen, groups, n, k, dtype=dtype, device=device, scale=k ** -0.5)
    b = randn(gen, groups, n, dtype=dtype, device=device, scale=0.5)
    dy = randn(gen, rows, n, dtype=dtype, device=device)
    return splits, x, w, b, dy


def _nan(shape, dtype, device):
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("kind", OPS_KINDS)
@pytest.mark.parametrize("shape", OPS_SHAPES, ids=OPS_SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_ops_forward_poisoned_out(device, dtype, shape, kind, with_bias, gen):
    splits, x, w, b, _ = _operands(gen, device, dtype, shape, kind)
    bias = b if with_bias else None
    out = _nan((x.shape[0], w.shape[1]), dtype, device)
    result = ops.forward(x, w, bias, splits, out=out)
    assert result.data_ptr() == out.data_ptr() or out.numel() == 0, "out= was not used"
    assert not torch.isnan(out).any(), "forward left elements of out unwritten"
    assert_close_rel(out, ref_forward(x, w, bias, splits), dtype, "ops.forward")


@pytest.mark.parametrize("kind", OPS_KINDS)
@pytest.mark.parametrize("shape", OPS_SHAPES, ids=OPS_SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_ops_dgrad_poisoned_out(device, dtype, shape, kind, gen):
    splits, x, w, _, dy = _operands(gen, device, dtype, shape, kind)
    out = _nan(tuple(x.shape), dtype, device)
    result = ops.dgrad(dy, w, splits, out=out)
    assert result.data_ptr() == out.data_ptr() or out.numel() == 0, "out= was not used"
    assert not torch.isnan(out).any(), "dgrad left elements of out unwritten"
    assert_close_rel(out, ref_dgrad(dy, w, splits), dtype, "ops.dgrad")


@pytest.mark.parametrize("kind", OPS_KINDS)
@pytest.mark.parametrize("shape", OPS_SHAPES, ids=OPS_SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_ops_wgrad_poisoned_out(device, dtype, shape, kind, gen):
    splits, x, w, b, dy = _operands(gen, device, dtype, shape, kind)
    grad_weight = _nan(tuple(w.shape), dtype, device)
    grad_bias = _nan(tuple(b.shape), dtype, device)
    dw, db = ops.wgrad(dy, x, splits, grad_weight=grad_weight, bias_grad=True,
                       grad_bias=grad_bias)
    assert dw.data_ptr() == grad_weight.data_ptr() and db.data_ptr() == grad_bias.data_ptr()
    assert not torch.isnan(grad_weight).any(), "wgrad left elements of grad_weight unwritten"
    assert not torch.isnan(grad_bias).any(), "wgrad left elements of grad_bias unwritten"
    dw_ref, db_ref = ref_wgrad(dy, x, splits)
    assert_close_rel(grad_weight, dw_ref, dtype, "ops.wgrad weight")
    assert_close_rel(grad_bias, db_ref, dtype, "ops.wgrad bias")
    assert_empty_groups_zero(grad_weight, splits, "grad_weight")
    assert_empty_groups_zero(grad_bias, splits, "grad_bias")


@pytest.mark.parametrize("which", ["weight_only", "bias_only"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_ops_wgrad_one_output(device, dtype, which, gen):
    splits, x, w, b, dy = _operands(gen, device, dtype, SHAPES[1], "random_with_zeros")
    dw_ref, db_ref = ref_wgrad(dy, x, splits)
    if which == "weight_only":
        dw, db = ops.wgrad(dy, x, splits)
        assert db is None
        assert_close_rel(dw, dw_ref, dtype, "ops.wgrad weight")
        assert_empty_groups_zero(dw, splits, "grad_weight")
    else:
        dw, db = ops.wgrad(dy, x, splits, weight_grad=False, bias_grad=True)
        assert dw is None
        assert_close_rel(db, db_ref, dtype, "ops.wgrad bias")
        assert_empty_groups_zero(db, splits, "grad_bias")


@pytest.mark.parametrize("kind", ["random_with_zeros", "all_empty"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_ops_wgrad_accumulate_fp32(device, dtype, kind, gen):
    """accumulate=True adds dW (float32) into the buffer; empty groups keep
    their prior values exactly."""
    splits, x, w, _, dy = _operands(gen, device, dtype, SHAPES[1], kind)
    prior = randn(gen, *w.shape, device=device)
    buffer = prior.clone()
    dw, _ = ops.wgrad(dy, x, splits, grad_weight=buffer, accumulate=True)
    assert dw.data_ptr() == buffer.data_ptr() and buffer.dtype == torch.float32
    dw_ref, _ = ref_wgrad(dy, x, splits)
    expected = prior.to("cpu", torch.float64) + dw_ref
    assert_close_rel(buffer, expected, torch.float32, "accumulated grad_weight")
    for g, m in enumerate(splits):
        if m == 0:
            assert torch.equal(buffer[g], prior[g]), f"empty group {g} changed the buffer"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_ops_forward_float32_out(device, dtype, gen):
    """A float32 `out` for 16-bit operands skips the output rounding: the
    result then meets the float32 bound."""
    splits, x, w, b, _ = _operands(gen, device, dtype, SHAPES[1], "random_with_zeros")
    out = _nan((x.shape[0], w.shape[1]), torch.float32, device)
    ops.forward(x, w, b, splits, out=out)
    assert_close_rel(out, ref_forward(x, w, b, splits), torch.float32, "float32 out", tol=1e-5)


@pytest.mark.parametrize("scale", [1.0, 1e-6, 3e4], ids=["unit", "subnormal", "overflow"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_ops_forward_output_rounding(device, dtype, scale, gen):
    """A 16-bit output is the float32 result rounded to nearest even, also for
    float16 subnormals and overflow to inf: compare the 16-bit `out` with the
    float32 `out` of the same problem converted by torch."""
    splits, x, w, b, _ = _operands(gen, device, dtype, SHAPES[1], "random_with_zeros")
    x = (x.float() * scale).to(dtype)
    if dtype == torch.float16 and scale == 1e-6:
        assert (x != 0).any()
    y32 = ops.forward(x, w, None, splits, out=_nan((x.shape[0], w.shape[1]), torch.float32,
                                                    device))
    y16 = ops.forward(x, w, None, splits)
    expected = y32.to(dtype)
    if device == "cpu":
        # The CPU engine accumulates both identically: bit-exact rounding.
        assert torch.equal(y16.view(torch.int16), expected.view(torch.int16))
    else:
        torch.testing.assert_close(y16, expected, rtol=2 * torch.finfo(dtype).eps, atol=0,
                                   equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_ops_match_module(device, dtype, gen):
    """The module's forward and backward are the three products."""
    groups, rows, k, n = SHAPES[1]
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    module = grouped_linear.GroupedLinear(groups, k, n, params_dtype=dtype, device=device)
    set_params(module, gen)
    x = randn(gen, rows, k, dtype=dtype, device=device).requires_grad_(True)
    dy = randn(gen, rows, n, dtype=dtype, device=device)
    out = module(x, splits)
    out.backward(dy)
    w, b = module.weight.detach(), module.bias.detach()
    assert torch.equal(out, ops.forward(x.detach(), w, b, splits))
    assert torch.equal(x.grad, ops.dgrad(dy, w, splits))
    dw, db = ops.wgrad(dy, x.detach(), splits, bias_grad=True)
    assert torch.equal(module.weight.grad, dw)
    assert torch.equal(module.bias.grad, db)


@pytest.mark.parametrize("layout", ["sliced_out_features", "every_other_group",
                                    "sliced_in_features"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_ops_strided_weight(device, dtype, layout, gen):
    """Weight views whose row or group strides exceed their extent are read
    through their strides (a base pointer and strides, no copy needed)."""
    groups, rows, k, n = SHAPES[1]
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    x = randn(gen, rows, k, dtype=dtype, device=device)
    dy = randn(gen, rows, n, dtype=dtype, device=device)
    if layout == "sliced_out_features":
        w = randn(gen, groups, n + 3, k, dtype=dtype, device=device, scale=k ** -0.5)[:, :n]
    elif layout == "every_other_group":
        w = randn(gen, 2 * groups, n, k, dtype=dtype, device=device, scale=k ** -0.5)[::2]
    else:
        w = randn(gen, groups, n, k + 4, dtype=dtype, device=device, scale=k ** -0.5)[:, :, :k]
    assert not w.is_contiguous()
    assert_close_rel(ops.forward(x, w, None, splits), ref_forward(x, w, None, splits), dtype,
                     "forward with strided weight")
    assert_close_rel(ops.dgrad(dy, w, splits), ref_dgrad(dy, w, splits), dtype,
                     "dgrad with strided weight")


@pytest.mark.parametrize("flag", [None, True, False])
def test_is_first_microbatch_accepted(device, flag, gen):
    module = grouped_linear.GroupedLinear(3, 16, 8, device=device)
    set_params(module, gen)
    x = randn(gen, 12, 16, device=device)
    with torch.no_grad():
        assert torch.equal(module(x, [5, 0, 7], is_first_microbatch=flag), module(x, [5, 0, 7]))
