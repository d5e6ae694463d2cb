"""CUDA only (skipped without a GPU): device m_splits, streams, CUDA graphs."""

import contextlib

import pytest
import torch

import grouped_linear
from fp8_testutil import fp8_bound
from gl_testutil import (DTYPE_IDS, DTYPES, assert_close_rel, make_splits, randn, ref_dgrad,
                         ref_forward, ref_wgrad, set_params)

G, K, N, T = 6, 40, 24, 96

# Engines documented to read device group sizes back with a stream sync
# (csrc/core/cuda/cublas_engine.h): correct, but not capturable in a graph
# with device m_splits.
SYNCING_ENGINES = {"cublas"}


def _syncs_on_device_splits(engine, dtype):
    # sm90_grouped has no fp32 kernels: it hands fp32 problems to cublas, which syncs.
    return engine in SYNCING_ENGINES or dtype == torch.float32


def _module(dtype, gen, **kwargs):
    module = grouped_linear.GroupedLinear(G, K, N, params_dtype=dtype, device="cuda", **kwargs)
    set_params(module, gen)
    return module


def _fwd_bwd(module, x, splits, dy):
    module.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    out = module(x, splits)
    out.backward(dy)
    return out.detach(), x.grad, module.weight.grad, module.bias.grad


@pytest.mark.parametrize("split_dtype", [torch.int64, torch.int32], ids=["int64", "int32"])
@pytest.mark.parametrize("kind", ["random_with_zeros", "one_group_all", "all_empty"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_device_m_splits_match_list(cuda_engine, dtype, kind, split_dtype, gen):
    module = _module(dtype, gen)
    rows = 0 if kind == "all_empty" else T
    splits = make_splits(gen, rows, G, kind)
    x = randn(gen, rows, K, dtype=dtype, device="cuda")
    dy = randn(gen, rows, N, dtype=dtype, device="cuda")
    expected = _fwd_bwd(module, x, splits, dy)
    device_splits = torch.tensor(splits, dtype=split_dtype, device="cuda")
    got = _fwd_bwd(module, x, device_splits, dy)
    for e, g, name in zip(expected, got, ["out", "dx", "dw", "db"]):
        assert torch.equal(e, g), f"{name}: device m_splits differ from the list form"
    assert torch.equal(device_splits.cpu(), torch.tensor(splits, dtype=split_dtype))


def test_device_m_splits_non_contiguous(cuda_engine, gen):
    module = _module(torch.bfloat16, gen)
    splits = make_splits(gen, T, G, "random_with_zeros")
    strided = torch.tensor([[s, -1] for s in splits], device="cuda")[:, 0]
    assert not strided.is_contiguous()
    x = randn(gen, T, K, dtype=torch.bfloat16, device="cuda")
    with torch.no_grad():
        assert torch.equal(module(x, strided), module(x, splits))


def test_device_m_splits_ops(cuda_engine, gen):
    from grouped_linear import ops
    splits = make_splits(gen, T, G, "random_with_zeros")
    dsplits = torch.tensor(splits, device="cuda")
    x = randn(gen, T, K, dtype=torch.bfloat16, device="cuda")
    w = randn(gen, G, N, K, dtype=torch.bfloat16, device="cuda", scale=K ** -0.5)
    dy = randn(gen, T, N, dtype=torch.bfloat16, device="cuda")
    assert torch.equal(ops.forward(x, w, None, dsplits), ops.forward(x, w, None, splits))
    assert torch.equal(ops.dgrad(dy, w, dsplits), ops.dgrad(dy, w, splits))
    dw_d, _ = ops.wgrad(dy, x, dsplits)
    dw_l, _ = ops.wgrad(dy, x, splits)
    assert torch.equal(dw_d, dw_l)


def test_device_m_splits_bad_sum_is_an_error(cuda_engine, gen):
    if cuda_engine not in SYNCING_ENGINES:
        pytest.skip("engines reading sizes on the device cannot raise synchronously")
    module = _module(torch.float32, gen)
    x = randn(gen, T, K, device="cuda")
    with pytest.raises(ValueError, match="m_splits"):
        module(x, torch.tensor([T + 1] + [0] * (G - 1), device="cuda"))


def test_side_stream(cuda_engine, gen):
    module = _module(torch.bfloat16, gen)
    splits = make_splits(gen, T, G, "random_with_zeros")
    x = randn(gen, T, K, dtype=torch.bfloat16, device="cuda")
    dy = randn(gen, T, N, dtype=torch.bfloat16, device="cuda")
    expected = _fwd_bwd(module, x, splits, dy)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = _fwd_bwd(module, x, splits, dy)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    for e, g, name in zip(expected, got, ["out", "dx", "dw", "db"]):
        assert torch.equal(e, g), f"{name} differs on a side stream"


def _step(module, x, splits, dy, recipe=None):
    """Forward and backward; with an FP8 recipe, autocast around the forward
    (its exit is delayed scaling's step boundary)."""
    region = contextlib.nullcontext() if recipe is None else grouped_linear.autocast(recipe=recipe)
    with region:
        out = module(x, splits)
    out.backward(dy)
    return out


def _capture(module, static_x, static_splits, static_dy, recipe=None):
    """Warm up on a side stream (lazy setup; per-stream resources such as a
    cuBLAS handle; a delayed-scaling history), then capture one step on that
    same stream."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            static_x.grad = None
            module.zero_grad(set_to_none=True)
            _step(module, static_x, static_splits, static_dy, recipe)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    static_x.grad = None
    module.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        static_out = _step(module, static_x, static_splits, static_dy, recipe)
    torch.cuda.synchronize()
    return graph, static_out


@pytest.mark.parametrize("split_form", ["list", "device_tensor"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cuda_graph_forward_backward(cuda_engine, dtype, split_form, gen):
    if split_form == "device_tensor" and _syncs_on_device_splits(cuda_engine, dtype):
        pytest.skip(f"{cuda_engine} reads device m_splits back with a sync for {dtype} (documented)")
    module = _module(dtype, gen)
    splits = make_splits(gen, T, G, "random_with_zeros")
    static_splits = splits if split_form == "list" else torch.tensor(splits, device="cuda")
    static_x = randn(gen, T, K, dtype=dtype, device="cuda").requires_grad_(True)
    static_dy = randn(gen, T, N, dtype=dtype, device="cuda")
    graph, static_out = _capture(module, static_x, static_splits, static_dy)

    for replay in range(2):
        new_splits = (splits if split_form == "list"
                      else make_splits(gen, T, G, "random_with_zeros"))
        if split_form == "device_tensor":
            static_splits.copy_(torch.tensor(new_splits))   # new routing, same graph
        with torch.no_grad():
            static_x.copy_(randn(gen, T, K, dtype=dtype))
            static_dy.copy_(randn(gen, T, N, dtype=dtype))
        graph.replay()
        torch.cuda.synchronize()
        what = f"replay {replay}"
        assert_close_rel(static_out, ref_forward(static_x, module.weight, module.bias, new_splits),
                         dtype, f"{what} out")
        assert_close_rel(static_x.grad, ref_dgrad(static_dy, module.weight, new_splits), dtype,
                         f"{what} dx")
        dw, db = ref_wgrad(static_dy, static_x, new_splits)
        assert_close_rel(module.weight.grad, dw, dtype, f"{what} dw")
        assert_close_rel(module.bias.grad, db, dtype, f"{what} db")


def test_cuda_graph_main_grad_accumulates(cuda_engine, gen):
    module = _module(torch.bfloat16, gen, fuse_wgrad_accumulation=True)
    main_grad = torch.zeros(G, N, K, device="cuda")
    module.weight.main_grad = main_grad
    splits = make_splits(gen, T, G, "random_with_zeros")
    static_x = randn(gen, T, K, dtype=torch.bfloat16, device="cuda")
    static_dy = randn(gen, T, N, dtype=torch.bfloat16, device="cuda")
    graph, _ = _capture(module, static_x, splits, static_dy)
    main_grad.zero_()
    expected = torch.zeros(G, N, K, dtype=torch.float64)
    for _ in range(3):
        with torch.no_grad():
            static_x.copy_(randn(gen, T, K, dtype=torch.bfloat16))
            static_dy.copy_(randn(gen, T, N, dtype=torch.bfloat16))
        graph.replay()
        expected += ref_wgrad(static_dy, static_x, splits)[0]
    torch.cuda.synchronize()
    assert module.weight.grad is None
    assert_close_rel(main_grad, expected, torch.float32, "main_grad after 3 replays")


# ---- FP8 steps in a CUDA graph ------------------------------------------------
#
# One FP8 training step (autocast around the forward, whose exit is delayed
# scaling's step boundary, then backward) captured once and replayed: each
# replay must do what the same step does eagerly from the same FP8 state,
# including moving that state (history rolled, scales updated). The eager
# twin gets the module's parameters and FP8 state (`_extra_state`) before
# each replay; the same kernels on the same inputs give the same bits.

FP8_RECIPES = {"delayed": lambda: grouped_linear.fp8.DelayedScaling(amax_history_len=4),
               "current": lambda: grouped_linear.fp8.Float8CurrentScaling(),
               "block": lambda: grouped_linear.fp8.Float8BlockScaling()}
FP8_K, FP8_N = 48, 32  # multiples of 16, as FP8 rows need


def _fp8_state(module):
    return torch.as_tensor(module.get_extra_state()).clone()


@pytest.mark.parametrize("split_form", ["list", "device_tensor"])
@pytest.mark.parametrize("recipe_name", list(FP8_RECIPES))
def test_cuda_graph_fp8_step(cuda_engine, recipe_name, split_form, gen):
    if split_form == "device_tensor" and cuda_engine in SYNCING_ENGINES:
        pytest.skip(f"{cuda_engine} reads device m_splits back with a sync (documented)")
    recipe = FP8_RECIPES[recipe_name]()
    dtype = torch.bfloat16

    def new_module():
        return grouped_linear.GroupedLinear(G, FP8_K, FP8_N, params_dtype=dtype, device="cuda")

    module, twin = new_module(), new_module()
    set_params(module, gen)
    splits = make_splits(gen, T, G, "random_with_zeros")
    static_splits = splits if split_form == "list" else torch.tensor(splits, device="cuda")
    static_x = randn(gen, T, FP8_K, dtype=dtype, device="cuda").requires_grad_(True)
    static_dy = randn(gen, T, FP8_N, dtype=dtype, device="cuda")

    graph, static_out = _capture(module, static_x, static_splits, static_dy, recipe)

    checkpoint = {k: v.clone() for k, v in module.state_dict().items()}
    states = []
    for replay in range(4):
        if replay == 3:
            # A checkpoint loaded into the captured module: the replay must
            # start from its FP8 state (the twin's does), not from buffers
            # the graph holds but the module no longer uses.
            module.load_state_dict(checkpoint)
        new_splits = (splits if split_form == "list"
                      else make_splits(gen, T, G, "random_with_zeros"))
        if split_form == "device_tensor":
            static_splits.copy_(torch.tensor(new_splits))  # new routing, same graph
        with torch.no_grad():
            static_x.copy_(randn(gen, T, FP8_K, dtype=dtype))
            static_dy.copy_(randn(gen, T, FP8_N, dtype=dtype))
        twin.load_state_dict(module.state_dict())  # parameters and FP8 state before the step
        graph.replay()
        torch.cuda.synchronize()

        x = static_x.detach().clone().requires_grad_(True)
        twin.zero_grad(set_to_none=True)
        twin_splits = (new_splits if split_form == "list"
                       else torch.tensor(new_splits, device="cuda"))
        out = _step(twin, x, twin_splits, static_dy.clone(), recipe)
        torch.cuda.synchronize()
        what = f"{recipe_name}, replay {replay}"
        assert torch.equal(static_out, out), f"{what}: out differs from the eager step"
        assert torch.equal(static_x.grad, x.grad), f"{what}: dx differs from the eager step"
        assert torch.equal(module.weight.grad, twin.weight.grad), f"{what}: dw differs"
        assert torch.equal(module.bias.grad, twin.bias.grad), f"{what}: db differs"
        assert torch.equal(_fp8_state(module), _fp8_state(twin)), f"{what}: FP8 state differs"
        # Not two wrong answers agreeing: the output within FP8's error of
        # the unquantized float64 product (fp8_bound, as test_fp8_modules.py).
        assert_close_rel(static_out, ref_forward(static_x, module.weight, module.bias, new_splits),
                         dtype, f"{what}: out against float64", fp8_bound("E4M3", "E4M3", dtype))
        states.append(_fp8_state(module))
    if recipe_name == "delayed":  # each replay ran the step boundary
        assert not torch.equal(states[0], states[1]) and not torch.equal(states[1], states[2])


class _RoutedLayer(torch.nn.Module):
    """A GroupedLinear with its m_splits on the device, so that its forward
    takes tensors only (what torch.cuda.make_graphed_callables replays)."""

    def __init__(self, splits):
        super().__init__()
        self.experts = grouped_linear.GroupedLinear(G, FP8_K, FP8_N, params_dtype=torch.bfloat16,
                                                    device="cuda")
        self.register_buffer("splits", torch.tensor(splits, device="cuda"))

    def forward(self, x):
        return self.experts(x, self.splits)


def test_make_graphed_callables_fp8_keeps_delayed_scaling_moving(gen):
    """grouped_linear.make_graphed_callables: every call of the graphed layer
    joins the caller's autocast region, so the region's exit updates the
    layer's delayed scaling as an eager step's would (with
    torch.cuda.make_graphed_callables alone the replayed forward registers
    nothing and the scales stay as captured). Each step equals an eager twin's
    from the same state, bit for bit, and the state moves from step to step."""
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
            and "sm90_grouped" in grouped_linear.ops.engine_names("cuda")):
        pytest.skip("device m_splits without a sync: the sm90_grouped engine")
    recipe = grouped_linear.fp8.DelayedScaling(amax_history_len=4)
    splits = make_splits(gen, T, G, "random_with_zeros")
    layer, twin = _RoutedLayer(splits), _RoutedLayer(splits)
    set_params(layer.experts, gen)
    sample = randn(gen, T, FP8_K, dtype=torch.bfloat16, device="cuda").requires_grad_(True)
    graphed = grouped_linear.make_graphed_callables(layer, (sample,), fp8_enabled=True,
                                                    fp8_recipe=recipe)
    with pytest.raises(RuntimeError, match="call it inside grouped_linear.autocast"):
        graphed(sample)
    states = []
    for step in range(3):
        x = randn(gen, T, FP8_K, dtype=torch.bfloat16, device="cuda").requires_grad_(True)
        dy = randn(gen, T, FP8_N, dtype=torch.bfloat16, device="cuda")
        twin.load_state_dict(layer.state_dict())  # parameters and FP8 state before the step
        layer.zero_grad(set_to_none=True)
        twin.zero_grad(set_to_none=True)
        with grouped_linear.autocast(recipe=recipe):
            out = graphed(x)
        out.backward(dy)
        x_twin = x.detach().clone().requires_grad_(True)
        with grouped_linear.autocast(recipe=recipe):
            out_twin = twin(x_twin)
        out_twin.backward(dy)
        torch.cuda.synchronize()
        what = f"step {step}"
        assert torch.equal(out, out_twin), f"{what}: out differs from the eager step"
        assert torch.equal(x.grad, x_twin.grad), f"{what}: dx differs"
        assert torch.equal(layer.experts.weight.grad, twin.experts.weight.grad), f"{what}: dw"
        state = _fp8_state(layer.experts)
        assert torch.equal(state, _fp8_state(twin.experts)), f"{what}: FP8 state differs"
        states.append(state)
    assert not torch.equal(states[0], states[1]) and not torch.equal(states[1], states[2])
