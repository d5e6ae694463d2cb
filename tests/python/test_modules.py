"""GroupedLinear and Linear as modules: shapes, layouts, split forms, options."""

import copy

import pytest
import torch
import torch.nn.functional as F

import grouped_linear
from gl_testutil import (forward_backward as _run, make_grouped, DTYPE_IDS, DTYPES, assert_close_rel, assert_empty_groups_zero,
                         make_splits, randn, ref_dgrad, ref_forward, ref_wgrad, set_params)

G, K, N, T = 4, 37, 23, 57


def _grouped(device, dtype=torch.float32, groups=G, k=K, n=N, gen=None, **kwargs):
    return make_grouped(device, dtype, groups, k, n, gen, **kwargs)


# --- Linear -----------------------------------------------------------------

@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_linear_matches_f_linear(device, dtype, with_bias, gen):
    module = grouped_linear.Linear(K, N, bias=with_bias, params_dtype=dtype, device=device)
    set_params(module, gen)
    x = randn(gen, 3, 19, K, dtype=dtype, device=device)
    dy = randn(gen, 3, 19, N, dtype=dtype, device=device)
    out, dx, dw, db = _run(module, x, None, dy)
    assert out.shape == (3, 19, N) and out.dtype == dtype

    # F.linear in float64 on the CPU, from the same values, with autograd.
    x64 = x.detach().cpu().double().requires_grad_(True)
    w64 = module.weight.detach().cpu().double().requires_grad_(True)
    b64 = module.bias.detach().cpu().double().requires_grad_(True) if with_bias else None
    ref = F.linear(x64, w64, b64)
    ref.backward(dy.cpu().double())
    assert_close_rel(out, ref, dtype, "Linear out")
    assert_close_rel(dx, x64.grad, dtype, "Linear grad_input")
    assert_close_rel(dw, w64.grad, dtype, "Linear grad_weight")
    if with_bias:
        assert db.shape == (N,)
        assert_close_rel(db, b64.grad, dtype, "Linear grad_bias")
    else:
        assert db is None and module.bias is None


def test_linear_matches_f_linear_same_dtype_fp32(device, gen):
    """Against torch's own float32 F.linear on the same device (not float64)."""
    module = grouped_linear.Linear(K, N, device=device)
    set_params(module, gen)
    x = randn(gen, 41, K, device=device)
    expected = F.linear(x, module.weight.detach(), module.bias.detach())
    assert_close_rel(module(x), expected, torch.float32, "Linear vs F.linear fp32")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_grouped_one_gemm_equals_linear(device, dtype, gen):
    grouped = _grouped(device, dtype, groups=1, gen=gen)
    linear = grouped_linear.Linear(K, N, params_dtype=dtype, device=device)
    with torch.no_grad():
        linear.weight.copy_(grouped.weight[0])
        linear.bias.copy_(grouped.bias[0])
    x = randn(gen, T, K, dtype=dtype, device=device)
    dy = randn(gen, T, N, dtype=dtype, device=device)
    g_out, g_dx, g_dw, g_db = _run(grouped, x, [T], dy)
    l_out, l_dx, l_dw, l_db = _run(linear, x, None, dy)
    assert torch.equal(g_out, l_out)
    assert torch.equal(g_dx, l_dx)
    assert torch.equal(g_dw[0], l_dw)
    assert torch.equal(g_db[0], l_db)


def test_linear_empty_input(device, gen):
    module = grouped_linear.Linear(K, N, device=device)
    x = torch.empty(0, K, device=device, requires_grad=True)
    out = module(x)
    assert out.shape == (0, N)
    out.backward(torch.empty(0, N, device=device))
    assert x.grad.shape == (0, K)
    assert torch.count_nonzero(module.weight.grad) == 0
    assert torch.count_nonzero(module.bias.grad) == 0


# --- GroupedLinear: shapes and layouts ---------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_three_dim_input(device, dtype, gen):
    module = _grouped(device, dtype, gen=gen)
    b, s = 3, 11
    splits = make_splits(gen, b * s, G, "random_with_zeros")
    x = randn(gen, b, s, K, dtype=dtype, device=device)
    dy = randn(gen, b, s, N, dtype=dtype, device=device)
    out, dx, dw, db = _run(module, x, splits, dy)
    assert out.shape == (b, s, N)
    assert dx.shape == (b, s, K)
    assert_close_rel(out, ref_forward(x, module.weight, module.bias, splits), dtype, "3-D out")
    assert_close_rel(dx.reshape(-1, K), ref_dgrad(dy, module.weight, splits), dtype, "3-D dgrad")
    dw_ref, db_ref = ref_wgrad(dy, x, splits)
    assert_close_rel(dw, dw_ref, dtype, "3-D wgrad")
    assert_close_rel(db, db_ref, dtype, "3-D bias grad")


def test_one_dim_input(device, gen):
    module = _grouped(device, gen=gen)
    x = randn(gen, K, device=device)
    out = module(x, [0, 1, 0, 0])
    assert out.shape == (N,)
    assert_close_rel(out, ref_forward(x, module.weight, module.bias, [0, 1, 0, 0]),
                     torch.float32, "1-D out")


def _layout(gen, device, dtype, layout):
    """A non-contiguous [T, K] view; the test compares it with its contiguous copy."""
    if layout == "transposed":                                   # column-major
        view = randn(gen, K, T, dtype=dtype, device=device).t()
    elif layout == "row_padded":                                 # rows of a wider matrix
        view = randn(gen, T, K + 5, dtype=dtype, device=device)[:, :K]
    elif layout == "row_strided":                                # every other row
        view = randn(gen, 2 * T, K, dtype=dtype, device=device)[::2]
    elif layout == "column_strided":                             # every other column
        view = randn(gen, T, 2 * K, dtype=dtype, device=device)[:, ::2]
    elif layout == "broadcast_rows":                             # stride 0 along rows
        view = randn(gen, 1, K, dtype=dtype, device=device).expand(T, K)
    else:
        raise ValueError(layout)
    assert not view.is_contiguous()
    return view


LAYOUTS = ["transposed", "row_padded", "row_strided", "column_strided", "broadcast_rows"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_non_contiguous_input(device, dtype, layout, gen):
    module = _grouped(device, dtype, gen=gen)
    view = _layout(gen, device, dtype, layout)
    splits = make_splits(gen, T, G, "random_with_zeros")
    dy = randn(gen, T, N, dtype=dtype, device=device)
    ref = _run(module, view.contiguous(), splits, dy)
    x = view.detach().requires_grad_(True)
    module.zero_grad(set_to_none=True)
    out = module(x, splits)
    out.backward(dy)
    assert torch.equal(out, ref[0])
    assert torch.equal(x.grad, ref[1])
    assert torch.equal(module.weight.grad, ref[2])
    assert torch.equal(module.bias.grad, ref[3])
    assert_close_rel(out, ref_forward(view, module.weight, module.bias, splits), dtype, "out")


def test_non_contiguous_three_dim_input(device, gen):
    module = _grouped(device, gen=gen)
    base = randn(gen, 5, 7, K, device=device)               # [B, S, K]
    permuted = base.transpose(0, 1).contiguous().transpose(0, 1)
    assert not permuted.is_contiguous() and torch.equal(permuted, base)
    splits = make_splits(gen, 35, G, "uniform_random")
    assert torch.equal(module(permuted, splits), module(base, splits))


@pytest.mark.parametrize("shape", [(0, K), (2, 0, K)], ids=["T0", "B2-S0"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_empty_input(device, dtype, shape, gen):
    module = _grouped(device, dtype, gen=gen)
    x = torch.empty(*shape, dtype=dtype, device=device, requires_grad=True)
    out = module(x, [0] * G)
    assert out.shape == (*shape[:-1], N) and out.dtype == dtype
    out.backward(torch.empty(*shape[:-1], N, dtype=dtype, device=device))
    assert x.grad.shape == x.shape
    assert module.weight.grad is not None and torch.count_nonzero(module.weight.grad) == 0
    assert module.bias.grad is not None and torch.count_nonzero(module.bias.grad) == 0


def test_empty_input_with_zero_strides(device, gen):
    module = _grouped(device, gen=gen)
    x = torch.zeros((), device=device).expand(0, K)
    assert module(x, [0] * G).shape == (0, N)


def test_zero_size_group(device, gen):
    module = _grouped(device, gen=gen)
    splits = [20, 0, 17, 0]
    x = randn(gen, 37, K, device=device)
    dy = randn(gen, 37, N, device=device)
    out, dx, dw, db = _run(module, x, splits, dy)
    assert_close_rel(out, ref_forward(x, module.weight, module.bias, splits), torch.float32, "out")
    assert_close_rel(dx, ref_dgrad(dy, module.weight, splits), torch.float32, "dgrad")
    assert_empty_groups_zero(dw, splits, "grad_weight")
    assert_empty_groups_zero(db, splits, "grad_bias")
    assert torch.count_nonzero(dw[0]) > 0 and torch.count_nonzero(dw[2]) > 0


# --- m_splits forms ------------------------------------------------------------

SPLIT_FORMS = ["list", "tuple", "cpu_int64", "cpu_int32", "numpy_ints", "tensor_items",
               "device_tensor"]


def _as_form(splits, form, device):
    if form == "list":
        return list(splits)
    if form == "tuple":
        return tuple(splits)
    if form == "cpu_int64":
        return torch.tensor(splits, dtype=torch.int64)
    if form == "cpu_int32":
        return torch.tensor(splits, dtype=torch.int32)
    if form == "numpy_ints":
        np = pytest.importorskip("numpy")
        return [np.int64(s) for s in splits]
    if form == "tensor_items":
        return [torch.tensor(s) for s in splits]
    if form == "device_tensor":
        if device == "cpu":
            pytest.skip("the device form is the CPU tensor form on the CPU")
        return torch.tensor(splits, dtype=torch.int64, device=device)
    raise ValueError(form)


@pytest.mark.parametrize("form", SPLIT_FORMS)
def test_m_splits_forms_identical(device, form, gen):
    module = _grouped(device, gen=gen)
    splits = make_splits(gen, T, G, "random_with_zeros")
    x = randn(gen, T, K, device=device)
    dy = randn(gen, T, N, device=device)
    ref = _run(module, x, splits, dy)
    got = _run(module, x, _as_form(splits, form, device), dy)
    for r, g, name in zip(ref, got, ["out", "dx", "dw", "db"]):
        assert torch.equal(r, g), f"{name} differs for m_splits as {form}"


def test_m_splits_tensor_not_modified(device, gen):
    module = _grouped(device, gen=gen)
    splits = torch.tensor([10, 0, 30, 17], dtype=torch.int32)
    before = splits.clone()
    module(randn(gen, 57, K, device=device).requires_grad_(True), splits).sum().backward()
    assert torch.equal(splits, before) and splits.dtype == torch.int32


# --- construction ----------------------------------------------------------------

def test_meta_init_then_to_empty(device, gen):
    module = grouped_linear.GroupedLinear(G, K, N, device="meta")
    assert module.weight.device.type == "meta" and module.bias.device.type == "meta"
    module.to_empty(device=device)
    module.reset_parameters()
    assert module.weight.device.type == device
    assert torch.isfinite(module.weight).all()
    std = float(module.weight.detach().float().std())
    assert 0.015 < std < 0.03, f"weight std {std}: default init is normal(0, 0.023)"
    assert torch.count_nonzero(module.bias) == 0
    splits = make_splits(gen, T, G, "random_with_zeros")
    x = randn(gen, T, K, device=device).requires_grad_(True)
    out = module(x, splits)
    assert_close_rel(out, ref_forward(x, module.weight, module.bias, splits), torch.float32,
                     "out after meta init")
    out.sum().backward()
    assert module.weight.grad is not None


def test_meta_linear_then_to_empty(device, gen):
    module = grouped_linear.Linear(K, N, device="meta")
    module.to_empty(device=device)
    module.reset_parameters()
    x = randn(gen, 9, K, device=device)
    assert_close_rel(module(x), ref_forward(x, module.weight, module.bias, [9]), torch.float32,
                     "Linear out after meta init")


def test_default_init(device):
    torch.manual_seed(0)
    module = grouped_linear.GroupedLinear(8, 64, 48, device=device)
    assert module.weight.shape == (8, 48, 64) and module.bias.shape == (8, 48)
    assert abs(float(module.weight.detach().std()) - 0.023) < 0.002
    assert torch.count_nonzero(module.bias) == 0


def test_default_device_is_cuda_when_available():
    module = grouped_linear.GroupedLinear(2, 8, 4)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert module.weight.device.type == expected
    linear = grouped_linear.Linear(8, 4)
    assert linear.weight.device.type == expected


def test_init_method_called_per_expert(device):
    calls = []

    def init(tensor):
        calls.append(tuple(tensor.shape))
        tensor.fill_(float(len(calls)))

    module = grouped_linear.GroupedLinear(G, K, N, device=device, init_method=init)
    assert calls == [(N, K)] * G
    for g in range(G):
        assert torch.all(module.weight[g] == g + 1), f"expert {g} was not initialised by its call"
    assert torch.count_nonzero(module.bias) == 0
    calls.clear()
    module.reset_parameters()
    assert len(calls) == G


def test_linear_init_method(device):
    seen = []
    module = grouped_linear.Linear(K, N, device=device,
                                   init_method=lambda t: (seen.append(t.shape), t.fill_(0.5)))
    assert seen == [(N, K)]
    assert torch.all(module.weight == 0.5)


@pytest.mark.parametrize("dtype", [None] + DTYPES, ids=["default"] + DTYPE_IDS)
def test_params_dtype(device, dtype, gen):
    module = grouped_linear.GroupedLinear(G, K, N, params_dtype=dtype, device=device)
    expected = torch.get_default_dtype() if dtype is None else dtype
    assert module.weight.dtype == expected and module.bias.dtype == expected
    x = randn(gen, 10, K, dtype=expected, device=device)
    assert module(x, [4, 0, 6, 0]).dtype == expected
    linear = grouped_linear.Linear(K, N, params_dtype=dtype, device=device)
    assert linear.weight.dtype == expected and linear(x).dtype == expected


def test_module_to_dtype(device, gen):
    module = _grouped(device, gen=gen).to(torch.bfloat16)
    x = randn(gen, 10, K, dtype=torch.bfloat16, device=device)
    out = module(x, [4, 0, 6, 0])
    assert out.dtype == torch.bfloat16
    assert_close_rel(out, ref_forward(x, module.weight, module.bias, [4, 0, 6, 0]),
                     torch.bfloat16, "out after .to(bfloat16)")


def test_bias_false(device, gen):
    module = _grouped(device, gen=gen, bias=False)
    assert module.bias is None
    assert [name for name, _ in module.named_parameters()] == ["weight"]
    # Per-expert weights, and the FP8 state under TE's key `_extra_state`.
    assert sorted(module.state_dict()) == ["_extra_state"] + [f"weight{g}" for g in range(G)]
    splits = make_splits(gen, T, G, "random_with_zeros")
    x = randn(gen, T, K, device=device)
    dy = randn(gen, T, N, device=device)
    out, dx, dw, _ = _run(module, x, splits, dy)
    assert_close_rel(out, ref_forward(x, module.weight, None, splits), torch.float32, "out")
    assert_close_rel(dx, ref_dgrad(dy, module.weight, splits), torch.float32, "dgrad")
    assert_close_rel(dw, ref_wgrad(dy, x, splits)[0], torch.float32, "wgrad")


# --- return_bias -------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_return_bias(device, dtype, gen):
    module = _grouped(device, dtype, gen=gen, return_bias=True)
    splits = make_splits(gen, T, G, "random_with_zeros")
    x = randn(gen, T, K, dtype=dtype, device=device).requires_grad_(True)
    out, biases = module(x, splits)
    assert_close_rel(out, ref_forward(x, module.weight, None, splits), dtype,
                     "return_bias out (no bias added)")
    assert isinstance(biases, list) and len(biases) == G
    for g in range(G):
        assert torch.equal(biases[g], module.bias[g])
    # The caller adds the bias (e.g. fused into a later op); gradients reach it.
    full = torch.cat([out[sum(splits[:g]):sum(splits[:g + 1])] + biases[g] for g in range(G)])
    assert_close_rel(full, ref_forward(x, module.weight, module.bias, splits), dtype, "out + bias")
    dy = randn(gen, T, N, dtype=dtype, device=device)
    full.backward(dy)
    assert_close_rel(module.bias.grad, ref_wgrad(dy, x, splits)[1], dtype, "bias grad")
    assert_close_rel(module.weight.grad, ref_wgrad(dy, x, splits)[0], dtype, "weight grad")


def test_return_bias_without_bias(device, gen):
    module = _grouped(device, gen=gen, bias=False, return_bias=True)
    out, biases = module(randn(gen, 8, K, device=device), [8, 0, 0, 0])
    assert biases is None and out.shape == (8, N)


def test_linear_return_bias(device, gen):
    module = grouped_linear.Linear(K, N, device=device, return_bias=True)
    set_params(module, gen)
    x = randn(gen, 8, K, device=device)
    out, bias = module(x)
    assert bias is module.bias
    assert_close_rel(out, ref_forward(x, module.weight, None, [8]), torch.float32, "out")


# --- usability bugs ------------------------------------------------------------------

@pytest.mark.parametrize("module_kind", ["grouped", "linear"])
def test_deepcopy_module(device, module_kind, gen):
    if module_kind == "grouped":
        module = _grouped(device, gen=gen, fuse_wgrad_accumulation=True)
        x = randn(gen, 8, K, device=device)
        call = lambda m: m(x, [8, 0, 0, 0])  # noqa: E731
    else:
        module = grouped_linear.Linear(K, N, device=device, fuse_wgrad_accumulation=True)
        x = randn(gen, 8, K, device=device)
        call = lambda m: m(x)  # noqa: E731
    clone = copy.deepcopy(module)
    assert clone.fuse_wgrad_accumulation
    assert clone.weight.data_ptr() != module.weight.data_ptr()
    with torch.no_grad():
        assert torch.equal(call(clone), call(module))
