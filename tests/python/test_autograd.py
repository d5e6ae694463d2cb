"""Autograd wiring: grad modes, which gradients are computed, gradient layouts."""

import pytest
import torch

import grouped_linear
from gl_testutil import (forward_backward as _run, make_grouped, DTYPE_IDS, DTYPES, assert_close_rel, make_splits, randn, ref_dgrad,
                         ref_wgrad, set_params)

G, K, N, T = 4, 37, 23, 57


def _grouped(device, dtype=torch.float32, groups=G, k=K, n=N, gen=None, **kwargs):
    return make_grouped(device, dtype, groups, k, n, gen, **kwargs)


def test_non_contiguous_grad_output(device, gen):
    module = _grouped(device, gen=gen)
    splits = make_splits(gen, T, G, "random_with_zeros")
    x = randn(gen, T, K, device=device)
    dy = randn(gen, N, T, device=device).t()                # non-contiguous gradient
    ref = _run(module, x, splits, dy.contiguous())
    got = _run(module, x, splits, dy)
    for r, g, name in zip(ref, got, ["out", "dx", "dw", "db"]):
        assert torch.equal(r, g), name


def test_expanded_grad_output_from_sum(device, gen):
    """loss = out.sum() gives a stride-0 grad_output."""
    module = _grouped(device, gen=gen)
    splits = make_splits(gen, T, G, "random_with_zeros")
    x = randn(gen, T, K, device=device).requires_grad_(True)
    module(x, splits).sum().backward()
    ones = torch.ones(T, N, dtype=torch.float64)
    assert_close_rel(x.grad, ref_dgrad(ones, module.weight, splits), torch.float32, "dgrad")
    dw_ref, db_ref = ref_wgrad(ones, x, splits)
    assert_close_rel(module.weight.grad, dw_ref, torch.float32, "wgrad")
    assert_close_rel(module.bias.grad, db_ref, torch.float32, "bias grad")


@pytest.mark.parametrize("module_kind", ["grouped", "linear"])
def test_empty_input_sum_backward(device, module_kind, gen):
    if module_kind == "grouped":
        module = _grouped(device, gen=gen)
        call = lambda x: module(x, [0] * G)  # noqa: E731
    else:
        module = grouped_linear.Linear(K, N, device=device)
        call = module
    x = torch.empty(0, K, device=device, requires_grad=True)
    call(x).sum().backward()
    assert x.grad.shape == (0, K)
    assert torch.count_nonzero(module.weight.grad) == 0


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "inputs_without_grad"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_no_grad_path_same_output(device, dtype, mode, gen):
    module = _grouped(device, dtype, gen=gen)
    splits = make_splits(gen, T, G, "random_with_zeros")
    x = randn(gen, T, K, dtype=dtype, device=device)
    with_grad = module(x.clone().requires_grad_(True), splits)
    assert with_grad.requires_grad
    if mode == "no_grad":
        with torch.no_grad():
            out = module(x, splits)
    elif mode == "inference_mode":
        with torch.inference_mode():
            out = module(x, splits)
    else:
        module.requires_grad_(False)
        out = module(x, splits)
    assert not out.requires_grad
    assert torch.equal(out, with_grad.detach())


def test_frozen_weight_input_grad_only(device, gen):
    module = _grouped(device, gen=gen)
    module.requires_grad_(False)
    splits = make_splits(gen, T, G, "random_with_zeros")
    x = randn(gen, T, K, device=device).requires_grad_(True)
    dy = randn(gen, T, N, device=device)
    module(x, splits).backward(dy)
    assert module.weight.grad is None and module.bias.grad is None
    assert_close_rel(x.grad, ref_dgrad(dy, module.weight, splits), torch.float32, "dgrad")


def test_bias_only_trainable(device, gen):
    module = _grouped(device, gen=gen)
    module.weight.requires_grad_(False)
    splits = make_splits(gen, T, G, "random_with_zeros")
    x = randn(gen, T, K, device=device)
    dy = randn(gen, T, N, device=device)
    module(x, splits).backward(dy)
    assert module.weight.grad is None
    assert_close_rel(module.bias.grad, ref_wgrad(dy, x, splits)[1], torch.float32, "bias grad")


def test_grads_accumulate_over_two_backwards(device, gen):
    module = _grouped(device, gen=gen)
    splits = make_splits(gen, T, G, "random_with_zeros")
    x1, x2 = randn(gen, T, K, device=device), randn(gen, T, K, device=device)
    dy1, dy2 = randn(gen, T, N, device=device), randn(gen, T, N, device=device)
    module(x1, splits).backward(dy1)
    module(x2, splits).backward(dy2)
    expected = ref_wgrad(dy1, x1, splits)[0] + ref_wgrad(dy2, x2, splits)[0]
    assert_close_rel(module.weight.grad, expected, torch.float32, "accumulated .grad")


@pytest.mark.parametrize("use_reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_activation_checkpointing_matches_the_plain_step(device, use_reentrant, gen):
    """torch.utils.checkpoint: the recomputed forward gives the same
    gradients, bit for bit. (Non-reentrant checkpointing stops recomputing by
    raising from a saved-tensor hook inside the forward; that exception must
    leave the C++ call as itself.)"""
    module = _grouped(device, gen=gen)
    splits = make_splits(gen, T, G, "random_with_zeros")
    x = randn(gen, T, K, device=device).requires_grad_(True)
    dy = randn(gen, T, N, device=device)
    module(x, splits).backward(dy)
    expected = [x.grad.clone(), module.weight.grad.clone(), module.bias.grad.clone()]
    x.grad = None
    module.zero_grad(set_to_none=True)
    out = torch.utils.checkpoint.checkpoint(lambda v: module(v, splits), x,
                                            use_reentrant=use_reentrant)
    out.backward(dy)
    for got, want, name in zip([x.grad, module.weight.grad, module.bias.grad], expected,
                               ["dx", "dw", "db"]):
        assert torch.equal(got, want), f"{name} differs under checkpointing"


def test_python_exceptions_from_hooks_leave_as_themselves(device, gen):
    """A Python exception raised by a saved-tensor hook during the forward
    keeps its type and message (it was a bare RuntimeError), and the module
    works after it."""
    class Stop(Exception):
        pass

    def pack(tensor):
        raise Stop("raised by the pack hook")

    module = _grouped(device, gen=gen)
    splits = make_splits(gen, T, G, "random_with_zeros")
    x = randn(gen, T, K, device=device).requires_grad_(True)
    with pytest.raises(Stop, match="raised by the pack hook"):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module(x, splits)
    module(x, splits).sum().backward()
    assert x.grad is not None


def test_gradcheck_float32_vs_float64_autograd(device, gen):
    """The autograd graph is wired right: compare torch.autograd.grad of a
    non-linear loss with the same loss built from float64 torch ops."""
    module = _grouped(device, gen=gen)
    splits = [9, 0, 20, 3]
    x = randn(gen, 32, K, device=device).requires_grad_(True)
    loss = (module(x, splits).tanh() ** 2).sum()
    gx, gw, gb = torch.autograd.grad(loss, [x, module.weight, module.bias])
    x64 = x.detach().cpu().double().requires_grad_(True)
    w64 = module.weight.detach().cpu().double().requires_grad_(True)
    b64 = module.bias.detach().cpu().double().requires_grad_(True)
    rows = torch.split(x64, splits)
    y64 = torch.cat([r @ w64[g].T + b64[g] for g, r in enumerate(rows)])
    loss64 = (y64.tanh() ** 2).sum()
    rx, rw, rb = torch.autograd.grad(loss64, [x64, w64, b64])
    assert_close_rel(gx, rx, torch.float32, "dx", tol=1e-4)
    assert_close_rel(gw, rw, torch.float32, "dw", tol=1e-4)
    assert_close_rel(gb, rb, torch.float32, "db", tol=1e-4)


@pytest.mark.parametrize("module_kind", ["grouped", "linear"])
def test_inplace_op_on_output(device, module_kind, gen):
    if module_kind == "grouped":
        module = _grouped(device, gen=gen)
        call = lambda x: module(x, [10, 0, 20, 3])  # noqa: E731
    else:
        module = grouped_linear.Linear(K, N, device=device)
        set_params(module, gen)
        call = module
    x = randn(gen, 33, K, device=device).requires_grad_(True)
    out = call(x)
    expected = torch.relu(out.detach() + 1)
    out.add_(1).relu_()                      # e.g. a residual add, nn.ReLU(inplace=True)
    assert torch.equal(out.detach(), expected)
    out.sum().backward()
    assert x.grad is not None
