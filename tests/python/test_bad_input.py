"""Bad input: each a clear error (type, message naming the argument), nothing
written, and the module still works afterwards."""

import subprocess
import sys
import textwrap

import pytest
import torch

import grouped_linear
from grouped_linear import ops
from gl_testutil import (assert_unchanged, check_module_healthy, randn, set_params, snapshot)

G, K, N, T = 3, 8, 4, 10
GOOD = [4, 0, 6]


@pytest.fixture
def fused(device, gen):
    """A module whose every buffer a failing call must leave alone."""
    module = grouped_linear.GroupedLinear(G, K, N, device=device, fuse_wgrad_accumulation=True)
    set_params(module, gen)
    module.weight.main_grad = randn(gen, G, N, K, device=device)
    return module


def _state(module):
    return snapshot(module.weight, module.bias, module.weight.main_grad)


def _assert_nothing_written(module, before, x=None):
    assert_unchanged(before, [module.weight, module.bias, module.weight.main_grad],
                     "weight/bias/main_grad")
    assert module.weight.grad is None and module.bias.grad is None
    if x is not None:
        assert x.grad is None


def _forward_backward(module, x, splits):
    module(x, splits).sum().backward()


def _x(gen, device, rows=T, k=K, dtype=torch.float32):
    return randn(gen, rows, k, dtype=dtype, device=device).requires_grad_(True)


# --- m_splits --------------------------------------------------------------------------

def _split_case(case, device):
    """(m_splits, exception, message pattern) for T=10 rows and G=3 groups."""
    cases = {
        "too_few": ([4, 6], ValueError, r"m_splits: has 2 entries; expected num_gemms = 3"),
        "too_many": ([4, 0, 6, 0], ValueError, r"m_splits: has 4 entries"),
        "empty_list": ([], ValueError, r"m_splits: has 0 entries"),
        "negative": ([11, -1, 0], ValueError, r"m_splits: entry 1 is -1"),
        "sum_too_small": ([4, 0, 5], ValueError, r"m_splits: sums to 9.*\(10\)"),
        "sum_too_large": ([4, 1, 6], ValueError, r"m_splits: sums to 11.*\(10\)"),
        "floats": ([4.0, 0.0, 6.0], TypeError, r"m_splits: entry 0 is 4\.0 \(float\)"),
        "strings": (["4", "0", "6"], TypeError, r"m_splits: entry 0 is '4' \(str\)"),
        "bools": ([True, False, True], TypeError, r"m_splits: entry 0 is True \(bool\)"),
        "none_entry": ([4, None, 6], TypeError, r"m_splits: entry 1 is None"),
        "none": (None, TypeError, r"m_splits: expected a list or tuple"),
        "int": (10, TypeError, r"m_splits: expected a list or tuple"),
        "dict": ({0: 4, 1: 0, 2: 6}, TypeError, r"m_splits: expected a list or tuple"),
        "generator": ((s for s in GOOD), TypeError, r"m_splits: expected a list or tuple"),
        "float_tensor": (torch.tensor([4.0, 0.0, 6.0]), TypeError, r"m_splits: dtype Float"),
        "bool_tensor": (torch.tensor([True, False, True]), TypeError, r"m_splits: dtype Bool"),
        "2d_tensor": (torch.tensor([[4, 0, 6]]), ValueError, r"m_splits: expected a 1-D tensor"),
        "0d_tensor": (torch.tensor(10), ValueError, r"m_splits: expected a 1-D tensor"),
        "tensor_wrong_len": (torch.tensor([4, 6]), ValueError, r"m_splits: has 2 entries"),
        "tensor_negative": (torch.tensor([11, -1, 0]), ValueError, r"m_splits: entry 1 is -1"),
        "tensor_bad_sum": (torch.tensor([4, 0, 7], dtype=torch.int32), ValueError,
                           r"m_splits: sums to 11"),
        "meta_tensor": (torch.tensor(GOOD, device="meta"), ValueError,
                        r"m_splits: is on meta but inp is on"),
    }
    return cases[case]


SPLIT_CASES = ["too_few", "too_many", "empty_list", "negative", "sum_too_small", "sum_too_large",
               "floats", "strings", "bools", "none_entry", "none", "int", "dict", "generator",
               "float_tensor", "bool_tensor", "2d_tensor", "0d_tensor", "tensor_wrong_len",
               "tensor_negative", "tensor_bad_sum", "meta_tensor"]


@pytest.mark.parametrize("case", SPLIT_CASES)
def test_bad_m_splits(device, fused, case, gen):
    splits, exc, pattern = _split_case(case, device)
    before = _state(fused)
    x = _x(gen, device)
    with pytest.raises(exc, match=pattern) as info:
        _forward_backward(fused, x, splits)
    assert str(info.value).startswith("grouped_linear: ")
    _assert_nothing_written(fused, before, x)
    check_module_healthy(fused, gen, num_gemms=G)


@pytest.mark.parametrize("case", ["too_few", "negative", "sum_too_large", "floats",
                                  "float_tensor", "meta_tensor"])
@pytest.mark.parametrize("op", ["forward", "dgrad", "wgrad"])
def test_bad_m_splits_ops_leave_out_untouched(device, op, case, gen):
    splits, exc, pattern = _split_case(case, device)
    x = randn(gen, T, K, device=device)
    w = randn(gen, G, N, K, device=device)
    dy = randn(gen, T, N, device=device)
    out = torch.full((T, N) if op == "forward" else (T, K) if op == "dgrad" else (G, N, K),
                     float("nan"), device=device)
    if op == "wgrad" and case == "too_few":
        # wgrad takes the group count from m_splits: the buffer is then the misfit.
        pattern = r"m_splits|grad_weight: shape \[3, 4, 8\].*\[2, 4, 8\]"
    with pytest.raises(exc, match=pattern):
        if op == "forward":
            ops.forward(x, w, None, splits, out=out)
        elif op == "dgrad":
            ops.dgrad(dy, w, splits, out=out)
        else:
            ops.wgrad(dy, x, splits, grad_weight=out)
    assert torch.isnan(out).all(), "a failing call wrote into out"


def test_m_splits_entry_too_large_for_int64(device, fused, gen):
    before = _state(fused)
    with pytest.raises(ValueError, match="m_splits"):
        _forward_backward(fused, _x(gen, device), [2 ** 64, 0, 0])
    _assert_nothing_written(fused, before)


def test_m_splits_float_tensor_entry(device, fused, gen):
    before = _state(fused)
    with pytest.raises(TypeError, match="m_splits"):
        _forward_backward(fused, _x(gen, device), [torch.tensor(4.0), 0, 6])
    _assert_nothing_written(fused, before)


_OVERFLOW_SCRIPT = textwrap.dedent("""
    import sys, torch, grouped_linear
    splits = {splits}
    module = grouped_linear.GroupedLinear(len(splits), 4, 4, device="cpu")
    x = torch.randn(4, 4)
    try:
        module(x, {form}(splits))
    except ValueError as e:
        print("ERROR:", e)
        sys.exit(0 if str(e).startswith("grouped_linear: m_splits") else 3)
    print("NO ERROR")
    sys.exit(4)
""")


@pytest.mark.parametrize("splits,form", [
    ([2 ** 63 - 1, 2 ** 63 - 1, 6], "list"),
    ([2 ** 62, 2 ** 62, 2 ** 62, 2 ** 62 + 4], "torch.tensor"),
], ids=["wraps_to_T-length_error", "wraps_to_T-segfault"])
def test_m_splits_sum_overflow(splits, form):
    # In a subprocess: the second case crashes the interpreter today.
    script = _OVERFLOW_SCRIPT.format(splits=splits, form=form)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, (f"rc={proc.returncode}; stdout={proc.stdout!r}; "
                                  f"stderr={proc.stderr[-500:]!r}")


# --- input ------------------------------------------------------------------------------

def _input_case(case, gen, device):
    if case == "last_dim_too_large":
        return _x(gen, device, k=K + 1), ValueError, r"inp: last dimension is 9\b.*\b8\b"
    if case == "last_dim_too_small":
        return _x(gen, device, k=K - 3), ValueError, r"inp: last dimension is 5\b.*\b8\b"
    if case == "0d":
        return torch.tensor(1.0, device=device, requires_grad=True), ValueError, r"inp: .*0-D"
    if case == "float64":
        return _x(gen, device, dtype=torch.float64), TypeError, r"inp: dtype Double"
    if case == "int32":
        return torch.ones(T, K, dtype=torch.int32, device=device), TypeError, r"inp: dtype Int"
    if case == "int64":
        return torch.ones(T, K, dtype=torch.int64, device=device), TypeError, r"inp: dtype Long"
    if case == "bool":
        return torch.ones(T, K, dtype=torch.bool, device=device), TypeError, r"inp: dtype Bool"
    if case == "bf16_vs_fp32_weight":
        return (_x(gen, device, dtype=torch.bfloat16), TypeError,
                r"mixed dtypes: inp is bfloat16 but weight is float32")
    if case == "fp16_vs_fp32_weight":
        return (_x(gen, device, dtype=torch.float16), TypeError,
                r"mixed dtypes: inp is float16 but weight is float32")
    if case == "meta_input":
        return (torch.empty(T, K, device="meta", requires_grad=True), ValueError,
                r"inp is on meta but weight is on")
    raise ValueError(case)


INPUT_CASES = ["last_dim_too_large", "last_dim_too_small", "0d", "float64", "int32", "int64",
               "bool", "bf16_vs_fp32_weight", "fp16_vs_fp32_weight", "meta_input"]


@pytest.mark.parametrize("case", INPUT_CASES)
def test_bad_input(device, fused, case, gen):
    x, exc, pattern = _input_case(case, gen, device)
    before = _state(fused)
    splits = [1, 0, 0] if case == "0d" else GOOD
    with pytest.raises(exc, match=pattern) as info:
        _forward_backward(fused, x, splits)
    assert str(info.value).startswith("grouped_linear: ")
    _assert_nothing_written(fused, before, x if x.requires_grad else None)
    check_module_healthy(fused, gen, num_gemms=G)


@pytest.mark.parametrize("case", ["last_dim_too_large", "float64", "bf16_vs_fp32_weight",
                                  "meta_input"])
def test_bad_input_linear(device, case, gen):
    module = grouped_linear.Linear(K, N, device=device)
    set_params(module, gen)
    x, exc, pattern = _input_case(case, gen, device)
    before = snapshot(module.weight, module.bias)
    with pytest.raises(exc, match=pattern):
        module(x).sum().backward()
    assert_unchanged(before, [module.weight, module.bias], "weight/bias")
    assert module.weight.grad is None
    check_module_healthy(module, gen)


def test_bad_input_under_no_grad(device, fused, gen):
    """The no-graph path checks the same things."""
    with torch.no_grad():
        with pytest.raises(ValueError, match="m_splits"):
            fused(_x(gen, device), [4, 0, 5])
        with pytest.raises(ValueError, match="inp"):
            fused(_x(gen, device, k=K + 1), GOOD)
        with pytest.raises(TypeError, match="inp"):
            fused(_x(gen, device, dtype=torch.bfloat16), GOOD)
    check_module_healthy(fused, gen, num_gemms=G)


def test_bias_dtype_mismatch(device, gen):
    """A bias whose dtype differs from the weight's (set by hand)."""
    module = grouped_linear.GroupedLinear(G, K, N, device=device)
    module.bias = torch.nn.Parameter(torch.zeros(G, N, dtype=torch.bfloat16, device=device))
    with pytest.raises(TypeError, match=r"bias is bfloat16 but weight is float32"):
        module(_x(gen, device), GOOD)


def test_device_mismatch_input_weight_cuda(cuda_device, gen):
    module = grouped_linear.GroupedLinear(G, K, N, device=cuda_device,
                                          fuse_wgrad_accumulation=True)
    module.weight.main_grad = torch.zeros(G, N, K, device=cuda_device)
    before = _state(module)
    x = _x(gen, "cpu")
    with pytest.raises(ValueError, match=r"inp is on cpu but weight is on cuda"):
        _forward_backward(module, x, GOOD)
    _assert_nothing_written(module, before, x)
    check_module_healthy(module, gen, num_gemms=G)


def test_device_mismatch_m_splits_cuda_input_cpu(cuda_device, gen):
    module = grouped_linear.GroupedLinear(G, K, N, device="cpu")
    with pytest.raises(ValueError, match=r"m_splits: is on cuda.* but inp is on cpu"):
        module(_x(gen, "cpu"), torch.tensor(GOOD, device=cuda_device))


def test_device_mismatch_m_splits_other_gpu(cuda_device, gen):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    module = grouped_linear.GroupedLinear(G, K, N, device="cuda:0")
    with pytest.raises(ValueError, match=r"m_splits: is on cuda:1"):
        module(_x(gen, "cuda:0"), torch.tensor(GOOD, device="cuda:1"))


# --- constructors ---------------------------------------------------------------------------

CTOR_CASES = [
    ("num_gemms_zero", dict(num_gemms=0), ValueError, r"num_gemms: is 0; expected an int >= 1"),
    ("num_gemms_negative", dict(num_gemms=-2), ValueError, r"num_gemms: is -2"),
    ("in_features_negative", dict(in_features=-1), ValueError, r"in_features: is -1"),
    ("in_features_zero", dict(in_features=0), ValueError, r"in_features: is 0"),
    ("out_features_zero", dict(out_features=0), ValueError, r"out_features: is 0"),
    ("num_gemms_str", dict(num_gemms="3"), TypeError, r"num_gemms: expected an int, got '3'"),
    ("num_gemms_float", dict(num_gemms=3.0), TypeError, r"num_gemms: expected an int, got 3\.0"),
    ("in_features_bool", dict(in_features=True), TypeError, r"in_features: expected an int"),
    ("out_features_none", dict(out_features=None), TypeError, r"out_features: expected an int"),
    ("params_dtype_float64", dict(params_dtype=torch.float64), TypeError,
     r"params_dtype: torch\.float64 is not supported"),
    ("params_dtype_int32", dict(params_dtype=torch.int32), TypeError,
     r"params_dtype: torch\.int32 is not supported"),
    ("params_dtype_str", dict(params_dtype="bfloat16"), TypeError, r"params_dtype"),
]


@pytest.mark.parametrize("override,exc,pattern", [c[1:] for c in CTOR_CASES],
                         ids=[c[0] for c in CTOR_CASES])
def test_grouped_constructor_args(override, exc, pattern):
    kwargs = dict(num_gemms=G, in_features=K, out_features=N, device="cpu")
    kwargs.update(override)
    args = [kwargs.pop(k) for k in ("num_gemms", "in_features", "out_features")]
    with pytest.raises(exc, match=pattern) as info:
        grouped_linear.GroupedLinear(*args, **kwargs)
    assert str(info.value).startswith("grouped_linear: ")


@pytest.mark.parametrize("override,exc,pattern",
                         [c[1:] for c in CTOR_CASES if "num_gemms" not in c[0]],
                         ids=[c[0] for c in CTOR_CASES if "num_gemms" not in c[0]])
def test_linear_constructor_args(override, exc, pattern):
    kwargs = dict(in_features=K, out_features=N, device="cpu")
    kwargs.update(override)
    args = [kwargs.pop(k) for k in ("in_features", "out_features")]
    with pytest.raises(exc, match=pattern):
        grouped_linear.Linear(*args, **kwargs)


# --- ops-level arguments ---------------------------------------------------------------------

def test_ops_bad_out_buffers(device, gen):
    x = randn(gen, T, K, device=device)
    w = randn(gen, G, N, K, device=device)
    dy = randn(gen, T, N, device=device)
    nan = lambda *s, **kw: torch.full(s, float("nan"), device=kw.get("device", device),  # noqa
                                      dtype=kw.get("dtype", torch.float32))
    cases = []
    out = nan(T, N + 1)
    cases.append((lambda: ops.forward(x, w, None, GOOD, out=out), ValueError, r"out: shape", out))
    out2 = nan(T, N, dtype=torch.float64)
    cases.append((lambda: ops.forward(x, w, None, GOOD, out=out2), TypeError, r"out: dtype", out2))
    out3 = nan(N, T).t()
    cases.append((lambda: ops.forward(x, w, None, GOOD, out=out3), ValueError, r"out: .*contig",
                  out3))
    out4 = nan(T, K - 1)
    cases.append((lambda: ops.dgrad(dy, w, GOOD, out=out4), ValueError, r"grad_input: shape",
                  out4))
    out5 = nan(G + 1, N, K)
    cases.append((lambda: ops.wgrad(dy, x, GOOD, grad_weight=out5), ValueError,
                  r"grad_weight: shape", out5))
    out6 = nan(G, N + 1)
    cases.append((lambda: ops.wgrad(dy, x, GOOD, bias_grad=True, grad_bias=out6), ValueError,
                  r"grad_bias: shape", out6))
    for call, exc, pattern, buffer in cases:
        with pytest.raises(exc, match=pattern) as info:
            call()
        assert str(info.value).startswith("grouped_linear: ")
        assert torch.isnan(buffer).all(), f"{pattern}: buffer written"


@pytest.mark.parametrize("case", ["out_on_meta", "weight_on_meta", "bias_on_meta"])
def test_ops_device_mismatch_reachable_on_cpu(case, gen):
    x = randn(gen, T, K)
    w = randn(gen, G, N, K)
    b = randn(gen, G, N)
    if case == "out_on_meta":
        call, pattern = lambda: ops.forward(x, w, b, GOOD, out=torch.empty(T, N, device="meta")), \
            r"out is on meta"
    elif case == "weight_on_meta":
        call, pattern = lambda: ops.forward(x, w.to("meta"), b, GOOD), \
            r"inp is on cpu but weight is on meta"
    else:
        call, pattern = lambda: ops.forward(x, w, b.to("meta"), GOOD), \
            r"bias is on meta but weight is on cpu"
    with pytest.raises(ValueError, match=pattern):
        call()


def test_ops_wgrad_accumulate_needs_buffer(device, gen):
    x = randn(gen, T, K, device=device)
    dy = randn(gen, T, N, device=device)
    with pytest.raises(ValueError, match="accumulate"):
        ops.wgrad(dy, x, GOOD, accumulate=True)


def test_ops_wgrad_row_mismatch(device, gen):
    with pytest.raises(ValueError, match="grad_output and inp"):
        ops.wgrad(randn(gen, T, N, device=device), randn(gen, T + 1, K, device=device), GOOD)


def test_ops_weight_must_be_3d(device, gen):
    with pytest.raises(ValueError, match="weight: expected a 3-D"):
        ops.forward(randn(gen, T, K, device=device), randn(gen, N, K, device=device), None, [T])


def test_unknown_engine(device, gen):
    x = randn(gen, T, K, device=device)
    w = randn(gen, G, N, K, device=device)
    with pytest.raises(ValueError, match=r"engine: 'no_such_engine' is not available"):
        ops.forward(x, w, None, GOOD, engine="no_such_engine")
    with pytest.raises(ValueError, match=r"engine: 'no_such_engine' is not available"):
        ops.set_engine_override(device, "no_such_engine")
    # A rejected override does not replace the pinned one.
    assert grouped_linear.engine_for(device) in ops.engine_names(device)


def test_engine_registry_api():
    assert ops.engine_names("cpu"), "no CPU engine"
    assert grouped_linear.engine_for("cpu") == ops.engine_names("cpu")[0]
    with pytest.raises(ValueError, match=r"device_type: 'tpu' is not supported"):
        ops.engine_names("tpu")
    with pytest.raises(ValueError, match=r"device_type: 'tpu' is not supported"):
        ops.set_engine_override("tpu", "")
    with pytest.raises(ValueError, match=r"device meta is not supported"):
        grouped_linear.engine_for("meta")
    if not grouped_linear.with_cuda:
        assert ops.engine_names("cuda") == []
