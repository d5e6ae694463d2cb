"""torch.compile: the modules trace into the registered dispatcher ops
(grouped_linear::forward / backward / fp8_forward / fp8_backward /
fp8_linear) with fullgraph=True (no graph break), and compiled runs equal
eager ones: outputs, every gradient and, under delayed scaling, the amax
histories and scales over several steps."""

import copy

import pytest
import torch

import grouped_linear as gl
from grouped_linear import fp8

from conftest import TOLERANCE

torch._dynamo.config.cache_size_limit = 64

G, K, N, N2 = 4, 32, 48, 16
SPLITS = [10, 0, 25, 5]  # one empty group


class Model(torch.nn.Module):
    def __init__(self, device, bias, dtype):
        super().__init__()
        self.experts = gl.GroupedLinear(G, K, N, bias=bias, device=device, params_dtype=dtype)
        self.proj = gl.Linear(N, N2, bias=bias, device=device, params_dtype=dtype)

    def forward(self, x, m_splits):
        return self.proj(self.experts(x, m_splits))


def _step(model, x, m_splits):
    for p in model.parameters():
        p.grad = None
    x = x.detach().clone().requires_grad_()
    y = model(x, m_splits)
    (y.float() * torch.linspace(-1, 1, y.shape[-1], device=y.device)).sum().backward()
    return [y.detach(), x.grad] + [p.grad for p in model.parameters()]


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def _assert_same(got, want, dtype):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g is not None and w is not None
        assert g.shape == w.shape and g.dtype == w.dtype
        assert _rel(g, w) <= TOLERANCE[dtype], _rel(g, w)


def _splits(kind, device):
    if kind == "list":
        return list(SPLITS)
    return torch.tensor(SPLITS, dtype=torch.int64, device=device)


def _pair(device, bias, dtype, backend):
    torch.manual_seed(0)
    eager = Model(device, bias, dtype)
    compiled_model = copy.deepcopy(eager)
    torch._dynamo.reset()
    return eager, compiled_model, torch.compile(compiled_model, fullgraph=True, backend=backend)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("splits_kind", ["list", "tensor"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_compile_matches_eager(device, bias, splits_kind, dtype):
    eager, _, compiled = _pair(device, bias, dtype, "aot_eager")
    x = torch.randn(sum(SPLITS), K, device=device).to(dtype)
    m_splits = _splits(splits_kind, device)
    for _ in range(2):  # the second call runs the cached graph
        _assert_same(_step(compiled, x, m_splits), _step(eager, x, m_splits), dtype)


def test_compile_no_graph_break(device):
    eager = Model(device, True, torch.float32)
    x = torch.randn(sum(SPLITS), K, device=device)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(eager)(x, _splits("tensor", device))
    assert explanation.graph_break_count == 0
    assert explanation.graph_count == 1
    ops = [str(n.target) for g in explanation.graphs for n in g.graph.nodes]
    assert any("grouped_linear.forward" in op for op in ops), ops


def test_compile_inductor(device):
    eager, _, compiled = _pair(device, True, torch.float32, "inductor")
    x = torch.randn(sum(SPLITS), K, device=device)
    _assert_same(_step(compiled, x, list(SPLITS)), _step(eager, x, list(SPLITS)), torch.float32)


RECIPES = {
    "delayed": lambda: fp8.DelayedScaling(amax_history_len=4),
    "current": fp8.Float8CurrentScaling,
    "block": fp8.Float8BlockScaling,
}


def _fp8_state(model):
    out = []
    for m in (model.experts, model.proj):
        s = m._fp8_state
        out += [s.amax_history_fwd, s.scale_fwd, s.amax_history_bwd, s.scale_bwd]
    return out


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("recipe_name", list(RECIPES))
def test_compile_fp8_matches_eager(device, recipe_name, backend):
    if backend == "inductor" and recipe_name != "delayed":
        pytest.skip("one inductor FP8 case keeps the runtime down")
    recipe = RECIPES[recipe_name]()
    eager, compiled_model, compiled = _pair(device, True, torch.float32, backend)
    x = torch.randn(sum(SPLITS), K, device=device)
    for step in range(3):
        m_splits = _splits("tensor" if step == 1 else "list", device)
        with gl.autocast(recipe=recipe):
            want = _step(eager, x * (step + 1), m_splits)
        with gl.autocast(recipe=recipe):
            got = _step(compiled, x * (step + 1), m_splits)
        _assert_same(got, want, torch.float32)
        if recipe_name == "delayed":
            # The step boundary (autocast exit) ran for the compiled model too,
            # and its histories and scales evolve exactly as eager ones.
            state_got, state_want = _fp8_state(compiled_model), _fp8_state(eager)
            for g, w in zip(state_got, state_want):
                assert torch.equal(g, w)
            assert float(state_want[0].abs().max()) > 0
            if step > 0:
                assert float((state_want[1] - 1).abs().max()) > 0  # scales moved off 1
    # Outside the region the same compiled module runs unquantized (a
    # recompile on the recipe guard), and the FP8 results differ from it.
    plain = _step(compiled, x * 3, list(SPLITS))
    assert _rel(got[0], plain[0]) > 1e-4


def test_compile_fp8_recompiles_per_recipe(device):
    eager, _, compiled = _pair(device, True, torch.float32, "aot_eager")
    x = torch.randn(sum(SPLITS), K, device=device)
    with gl.autocast(recipe=fp8.Float8CurrentScaling()):
        fp8_out = compiled(x, list(SPLITS))
        fp8_want = eager(x, list(SPLITS))
    plain_out = compiled(x, list(SPLITS))  # outside the region: the unquantized graph
    assert torch.equal(fp8_out, fp8_want)
    assert torch.equal(plain_out, eager(x, list(SPLITS)))
    assert not torch.equal(plain_out, fp8_out)


def _opcheck_args(device, grouped):
    x = torch.randn(6, K, device=device, requires_grad=True)
    w = torch.randn(*((G, N, K) if grouped else (N, K)), device=device, requires_grad=True)
    b = torch.randn(*((G, N) if grouped else (N,)), device=device, requires_grad=True)
    # On the input's device, as _compile.forward passes it (fake tensors cannot
    # mix a CPU m_splits into a CUDA op).
    s = torch.tensor([2, 0, 3, 1], device=device) if grouped else None
    return x, w, b, s


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "linear"])
def test_opcheck(device, grouped):
    x, w, b, s = _opcheck_args(device, grouped)
    ops = torch.ops.grouped_linear
    torch.library.opcheck(ops.forward, (x, w, b, s))
    dy = torch.randn(6, N, device=device)
    torch.library.opcheck(ops.backward, (dy, x.detach(), w.detach(), s, [True, True, True]))
    torch.library.opcheck(ops.backward, (dy, x.detach(), w.detach(), s, [True, False, False]))


@pytest.mark.parametrize("bad, pattern", [
    (lambda c: c[:6], r"recipe: expected 7 ints \(.*split-accumulator bits\), got 6"),
    (lambda c: c[:6] + [8], r"recipe: split-accumulator bits 8; expected 0 to 7"),
])
def test_fp8_op_rejects_bad_recipe_codes(device, bad, pattern):
    """The recipe's int list (as torch.compile passes it) is checked, and the
    op works after a refused call (dispatcher ops raise RuntimeError)."""
    x, w, b, s = _opcheck_args(device, True)
    codes = list(fp8._encode(fp8.Float8CurrentScaling().to_native()))
    args = (x.detach(), w.detach(), b.detach(), s)
    with pytest.raises(RuntimeError, match=pattern):
        torch.ops.grouped_linear.fp8_forward(*args, bad(codes), None, None, -1, True, False,
                                             False)
    y = torch.ops.grouped_linear.fp8_forward(*args, codes, None, None, -1, True, False, False)[0]
    assert y.shape == (6, N) and torch.isfinite(y).all()


@pytest.mark.parametrize("recipe_name", list(RECIPES))
def test_opcheck_fp8(device, recipe_name):
    x, w, b, s = _opcheck_args(device, True)
    codes = list(fp8._encode(RECIPES[recipe_name]().to_native()))
    hist = scale = bhist = bscale = None
    if recipe_name == "delayed":
        hist, scale = torch.zeros(4, 1 + G, device=device), torch.ones(1 + G, device=device)
        bhist, bscale = torch.zeros(4, 1, device=device), torch.ones(1, device=device)
    ops = torch.ops.grouped_linear
    # The column-wise copy of X leaves its unused padding columns unwritten
    # (no GEMM reads them), so that output is not compared between eager and
    # AOT runs here; fp8_linear below compares the result end to end.
    torch.library.opcheck(ops.fp8_forward, (x.detach(), w.detach(), b.detach(), s, codes, hist,
                                            scale, -1, True, True, False),
                          test_utils=("test_schema", "test_autograd_registration",
                                      "test_faketensor"))
    torch.library.opcheck(ops.fp8_forward, (x.detach(), w.detach(), b.detach(), s, codes, hist,
                                            scale, -1, True, False, False))
    y, xc, xs, wc, ws = ops.fp8_forward(x.detach(), w.detach(), b.detach(), s, codes, hist, scale,
                                        -1, True, True, False)
    # The schema declares no aliasing, so no two outputs share storage (the
    # module path keeps a copy's codes and scales in one allocation; this op
    # must not).
    storages = [t.untyped_storage().data_ptr() for t in (y, xc, xs, wc, ws)]
    assert len(set(storages)) == 5, storages
    dy = torch.randn_like(y)
    torch.library.opcheck(ops.fp8_backward, (dy, xc, xs, wc, ws, s, codes, bhist, bscale, scale,
                                             list(w.shape), w.dtype, [True, True, True], False),
                          # test_schema compares the inputs with allclose, which
                          # float8 tensors do not support on the CPU.
                          test_utils=("test_autograd_registration", "test_faketensor",
                                      "test_aot_dispatch_dynamic"))
    torch.library.opcheck(ops.fp8_linear, (x, w, b, s, codes, hist, scale, bhist, bscale, -1,
                                           False))


def test_eager_forward_does_not_use_the_ops(device, monkeypatch):
    """Eager keeps the single pybind call: the compile path is never taken."""
    from grouped_linear import _compile

    def fail(*args, **kwargs):
        raise AssertionError("the compile path ran in eager mode")

    monkeypatch.setattr(_compile, "forward", fail)
    model = Model(device, True, torch.float32)
    model(torch.randn(sum(SPLITS), K, device=device), list(SPLITS))


def test_torch_export(device):
    """torch.export.export traces the modules into the registered ops (device
    m_splits as a buffer), and the exported program computes what the model
    does."""
    class Routed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Model(device, True, torch.float32)
            self.register_buffer("splits", torch.tensor(SPLITS, device=device))

        def forward(self, x):
            return self.model(x, self.splits)

    torch.manual_seed(0)
    routed = Routed()
    x = torch.randn(sum(SPLITS), K, device=device)
    program = torch.export.export(routed, (x,))
    assert "torch.ops.grouped_linear.forward" in program.graph_module.code
    with torch.no_grad():
        assert torch.equal(program.module()(x), routed(x))


@pytest.mark.parametrize("recipe_name", list(RECIPES))
def test_compile_fp8_under_amp_matches_eager(device, recipe_name):
    """FP8 inside torch.autocast: compiled and eager quantize the float32
    weights from their own values (one rounding, no bf16 copy), so they give
    the same bits: output and input gradient in bf16, weight and bias
    gradients in float32, and delayed scaling's state after the step."""
    eager, compiled_model, compiled = _pair(device, True, torch.float32, "aot_eager")
    x = torch.randn(sum(SPLITS), K, device=device)
    for step in range(2):
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            with gl.autocast(recipe=RECIPES[recipe_name]()):
                want = _step(eager, x * (step + 1), list(SPLITS))
            with gl.autocast(recipe=RECIPES[recipe_name]()):
                got = _step(compiled, x * (step + 1), list(SPLITS))
        assert [t.dtype for t in got] == [torch.bfloat16, torch.float32] + [torch.float32] * 4
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and torch.equal(g, w), _rel(g, w)
        if recipe_name == "delayed":
            for g, w in zip(_fp8_state(compiled_model), _fp8_state(eager)):
                assert torch.equal(g, w)


@pytest.mark.parametrize("recipe_name", list(RECIPES))
def test_compile_fp8_rejects_what_eager_rejects(device, recipe_name):
    """A float32 module called with bf16 input outside torch.autocast: eager
    FP8 refuses the float32 bias (the output is bf16), and so does the
    compiled op at run time, with the same message (as RuntimeError: the
    dispatcher's type) and no state touched; the compiled module then runs a
    good call. Before, the compiled op took the bias and fell to the slow
    emulation."""
    eager, compiled_model, compiled = _pair(device, True, torch.float32, "aot_eager")
    x = torch.randn(sum(SPLITS), K, device=device, dtype=torch.bfloat16)
    for model, error in ((eager, TypeError), (compiled, RuntimeError)):
        with gl.autocast(recipe=RECIPES[recipe_name]()):
            with pytest.raises(error, match="mixed dtypes: bias is Float but inp is BFloat16"):
                model(x, list(SPLITS))
    if recipe_name == "delayed":
        # The compiled module's buffers were made while tracing; no amax is
        # recorded in them, and the scales are still 1.
        state = _fp8_state(compiled_model)
        assert all(t is not None for t in state)
        assert all(torch.all(t == 0) for t in state[0::2]) and all(torch.all(t == 1) for t in state[1::2])
    with gl.autocast(recipe=RECIPES[recipe_name]()):
        want = _step(eager, x.float(), list(SPLITS))
        got = _step(compiled, x.float(), list(SPLITS))
    for g, w in zip(got, want):
        assert torch.equal(g, w), _rel(g, w)
