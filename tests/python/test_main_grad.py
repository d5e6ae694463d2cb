"""fuse_wgrad_accumulation: weight gradients added into weight.main_grad."""

import pytest
import torch

import grouped_linear
from grouped_linear import ops
from gl_testutil import (DTYPE_IDS, DTYPES, TOLERANCE, assert_close_rel, assert_unchanged,
                         check_module_healthy, make_splits, randn, ref_wgrad, set_params, snapshot)

G, K, N, T = 4, 37, 23, 61


def _fused(device, dtype, gen, groups=G, **kwargs):
    module = grouped_linear.GroupedLinear(groups, K, N, params_dtype=dtype, device=device,
                                          fuse_wgrad_accumulation=True, **kwargs)
    set_params(module, gen)
    return module


@pytest.mark.parametrize("prior", ["zeros", "random"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_two_steps_accumulate(device, dtype, prior, gen):
    module = _fused(device, dtype, gen)
    start = (torch.zeros(G, N, K, device=device) if prior == "zeros"
             else randn(gen, G, N, K, device=device))
    main_grad = start.clone()
    module.weight.main_grad = main_grad
    steps = []
    for step in range(2):
        splits = make_splits(gen, T, G, "random_with_zeros")
        x = randn(gen, T, K, dtype=dtype, device=device).requires_grad_(True)
        dy = randn(gen, T, N, dtype=dtype, device=device)
        module(x, splits).backward(dy)
        steps.append((splits, x.detach(), dy))
        assert module.weight.grad is None, f"weight.grad set at step {step}"
        assert module.weight.main_grad is main_grad
    assert main_grad.dtype == torch.float32

    # main_grad == start + dW_step1 + dW_step2 (float32 accumulation).
    expected = start.cpu().double()
    for splits, x, dy in steps:
        expected = expected + ref_wgrad(dy, x, splits)[0]
    assert_close_rel(main_grad, expected, torch.float32, "main_grad")

    # ... and equals the library's own float32 weight gradients of both steps.
    own = start.clone()
    for splits, x, dy in steps:
        own += ops.wgrad(dy, x, splits, grad_weight=torch.empty_like(start))[0]
    torch.testing.assert_close(main_grad, own, rtol=1e-6, atol=1e-6)

    # Groups empty in both steps keep their starting value exactly.
    for g in range(G):
        if all(splits[g] == 0 for splits, _, _ in steps):
            assert torch.equal(main_grad[g], start[g]), f"empty group {g} changed main_grad"

    # The bias is not fused: its .grad accumulates as usual.
    db = sum(ref_wgrad(dy, x, splits)[1] for splits, x, dy in steps)
    assert module.bias.grad is not None and module.bias.grad.dtype == dtype
    assert_close_rel(module.bias.grad, db, dtype, "bias.grad", tol=2 * TOLERANCE[dtype])


def test_linear_fused_accumulation(device, gen):
    module = grouped_linear.Linear(K, N, params_dtype=torch.bfloat16, device=device,
                                   fuse_wgrad_accumulation=True)
    set_params(module, gen)
    module.weight.main_grad = torch.zeros(N, K, device=device)
    expected = torch.zeros(N, K, dtype=torch.float64)
    for _ in range(2):
        x = randn(gen, 3, 9, K, dtype=torch.bfloat16, device=device)
        dy = randn(gen, 3, 9, N, dtype=torch.bfloat16, device=device)
        module(x).backward(dy)
        expected += ref_wgrad(dy, x, [27])[0][0]
    assert module.weight.grad is None
    assert_close_rel(module.weight.main_grad, expected, torch.float32, "Linear main_grad")


def test_main_grad_replaced_between_steps(device, gen):
    """The buffer is read from weight.main_grad at each forward."""
    module = _fused(device, torch.bfloat16, gen)
    first = torch.zeros(G, N, K, device=device)
    second = torch.zeros(G, N, K, device=device)
    grads = []
    for buffer in (first, second):
        module.weight.main_grad = buffer
        x = randn(gen, T, K, dtype=torch.bfloat16, device=device)
        dy = randn(gen, T, N, dtype=torch.bfloat16, device=device)
        splits = make_splits(gen, T, G, "uniform_random")
        module(x, splits).backward(dy)
        grads.append(ref_wgrad(dy, x, splits)[0])
    assert_close_rel(first, grads[0], torch.float32, "first buffer")
    assert_close_rel(second, grads[1], torch.float32, "second buffer")


def test_empty_input_leaves_main_grad_unchanged(device, gen):
    """T = 0: every group is empty, the weight gradient is zero: main_grad keeps
    its values exactly."""
    module = _fused(device, torch.bfloat16, gen)
    main_grad = randn(gen, G, N, K, device=device)
    before = main_grad.clone()
    module.weight.main_grad = main_grad
    x = torch.empty(0, K, dtype=torch.bfloat16, device=device, requires_grad=True)
    module(x, [0] * G).backward(torch.empty(0, N, dtype=torch.bfloat16, device=device))
    assert torch.equal(main_grad, before)
    assert module.weight.grad is None
    assert x.grad.shape == (0, K)


def test_frozen_weight_needs_no_main_grad(device, gen):
    module = _fused(device, torch.bfloat16, gen)
    module.weight.requires_grad_(False)
    x = randn(gen, T, K, dtype=torch.bfloat16, device=device).requires_grad_(True)
    module(x, make_splits(gen, T, G, "uniform_random")).sum().backward()
    assert x.grad is not None and module.weight.grad is None


def test_no_grad_needs_no_main_grad(device, gen):
    module = _fused(device, torch.bfloat16, gen)
    x = randn(gen, T, K, dtype=torch.bfloat16, device=device)
    with torch.no_grad():
        out = module(x, make_splits(gen, T, G, "uniform_random"))
    assert out.shape == (T, N)


# --- bad main_grad: a clear error, nothing written, the module still works ----------

def _bad_main_grad(case, device):
    if case == "missing":
        return None, ValueError, "main_grad"
    if case == "bf16_dtype":
        return torch.zeros(G, N, K, dtype=torch.bfloat16, device=device), TypeError, "main_grad"
    if case == "fp16_dtype":
        return torch.zeros(G, N, K, dtype=torch.float16, device=device), TypeError, "main_grad"
    if case == "float64_dtype":
        return torch.zeros(G, N, K, dtype=torch.float64, device=device), TypeError, "main_grad"
    if case == "wrong_shape":
        return torch.zeros(G, N, K + 1, device=device), ValueError, r"main_grad.*shape"
    if case == "wrong_groups":
        return torch.zeros(G - 1, N, K, device=device), ValueError, r"main_grad.*shape"
    if case == "flat_shape":
        return torch.zeros(G * N * K, device=device), ValueError, r"main_grad.*shape"
    if case == "non_contiguous":
        return (torch.zeros(G, K, N, device=device).transpose(1, 2), ValueError,
                r"main_grad.*contiguous")
    if case == "meta_device":
        return torch.zeros(G, N, K, device="meta"), ValueError, r"main_grad.*meta"
    raise ValueError(case)


BAD_MAIN_GRAD = ["missing", "bf16_dtype", "fp16_dtype", "float64_dtype", "wrong_shape",
                 "wrong_groups", "flat_shape", "non_contiguous", "meta_device"]


@pytest.mark.parametrize("case", BAD_MAIN_GRAD)
def test_bad_main_grad(device, case, gen):
    module = _fused(device, torch.bfloat16, gen)
    bad, exc, pattern = _bad_main_grad(case, device)
    if bad is not None:
        module.weight.main_grad = bad
    before = snapshot(module.weight, module.bias, bad if bad is not None and
                      bad.device.type != "meta" else None)
    x = randn(gen, T, K, dtype=torch.bfloat16, device=device).requires_grad_(True)
    with pytest.raises(exc, match=pattern) as info:
        module(x, make_splits(gen, T, G, "uniform_random")).sum().backward()
    assert str(info.value).startswith("grouped_linear: ")
    after = [module.weight, module.bias,
             bad if bad is not None and bad.device.type != "meta" else None]
    assert_unchanged(before, after, "weight/bias/main_grad")
    assert module.weight.grad is None and x.grad is None
    # Fix the buffer: the module works.
    module.weight.main_grad = torch.zeros(G, N, K, device=device)
    check_module_healthy(module, gen, num_gemms=G)


def test_linear_bad_main_grad_shape(device, gen):
    module = grouped_linear.Linear(K, N, device=device, fuse_wgrad_accumulation=True)
    module.weight.main_grad = torch.zeros(1, N, K, device=device)
    with pytest.raises(ValueError, match="main_grad"):
        module(randn(gen, 4, K, device=device).requires_grad_(True))
    module.weight.main_grad = torch.zeros(N, K, device=device)
    check_module_healthy(module, gen)


@pytest.mark.parametrize("bad_input", ["m_splits_sum", "m_splits_len", "last_dim", "dtype"])
def test_failing_forward_leaves_main_grad_unchanged(device, bad_input, gen):
    module = _fused(device, torch.bfloat16, gen)
    main_grad = randn(gen, G, N, K, device=device)
    module.weight.main_grad = main_grad
    before = main_grad.clone()
    x = randn(gen, T, K, dtype=torch.bfloat16, device=device).requires_grad_(True)
    splits = make_splits(gen, T, G, "uniform_random")
    if bad_input == "m_splits_sum":
        call, exc, pattern = (lambda: module(x, [s + 1 for s in splits])), ValueError, "m_splits"
    elif bad_input == "m_splits_len":
        call, exc, pattern = (lambda: module(x, splits + [0])), ValueError, "m_splits"
    elif bad_input == "last_dim":
        x2 = randn(gen, T, K + 1, dtype=torch.bfloat16, device=device).requires_grad_(True)
        call, exc, pattern = (lambda: module(x2, splits)), ValueError, "inp"
    else:
        x2 = x.detach().float().requires_grad_(True)
        call, exc, pattern = (lambda: module(x2, splits)), TypeError, "inp"
    with pytest.raises(exc, match=pattern):
        call().sum().backward()
    assert torch.equal(main_grad, before), "main_grad written by a failing call"
    assert module.weight.grad is None
    check_module_healthy(module, gen, num_gemms=G)
