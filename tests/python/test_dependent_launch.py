"""Programmatic dependent launch (ops.set_dependent_launch): the switch on
every build; on an sm_90 GPU, the casts and grouped GEMMs launched as
dependents give the same bits as in plain stream order, in chains of layers
that read what the kernel just before them wrote, eagerly and in a CUDA graph."""

import pytest
import torch

import grouped_linear
from grouped_linear import fp8, ops
from gl_testutil import make_splits, randn, set_params


@pytest.fixture
def restore_switch():
    before = ops.dependent_launch()
    yield
    ops.set_dependent_launch(before)


def test_switch_reads_back_and_takes_only_a_bool(restore_switch):
    ops.set_dependent_launch(False)
    assert ops.dependent_launch() is False
    ops.set_dependent_launch(True)
    assert ops.dependent_launch() is grouped_linear.with_cuda  # a CPU build launches nothing
    with pytest.raises(TypeError, match="enabled: got 1, expected a bool"):
        ops.set_dependent_launch(1)
    assert ops.dependent_launch() is grouped_linear.with_cuda


def _sm90():
    return (torch.cuda.is_available() and grouped_linear.with_cuda
            and torch.cuda.get_device_capability() == (9, 0)
            and "sm90_grouped" in ops.engine_names("cuda"))


needs_sm90 = pytest.mark.skipif(not _sm90(), reason="needs an sm_90 GPU and the sm90 engine")

G, WIDTH, LAYERS = 8, 256, 4
RECIPES = {
    "bf16": None,
    "fp8_delayed": fp8.DelayedScaling,
    "fp8_current": fp8.Float8CurrentScaling,
    "fp8_block": fp8.Float8BlockScaling,
}


def _layers(seed):
    gen = torch.Generator().manual_seed(seed)
    layers = []
    for _ in range(LAYERS):
        layer = grouped_linear.GroupedLinear(G, WIDTH, WIDTH, bias=False,
                                             params_dtype=torch.bfloat16, device="cuda")
        set_params(layer, gen)
        layers.append(layer)
    return layers


def _chain_step(layers, x, splits, dy, recipe):
    """Forward through every layer, each reading the last one's output at
    once, then backward: what a dependent kernel must wait for is always the
    kernel just before it."""
    for layer in layers:
        layer.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    region = grouped_linear.autocast(recipe=recipe()) if recipe else grouped_linear.autocast(
        enabled=False)
    with region:
        h = x
        for layer in layers:
            h = layer(h, splits)
    h.backward(dy)
    return [h.detach(), x.grad] + [layer.weight.grad for layer in layers]


@needs_sm90
@pytest.mark.parametrize("recipe", list(RECIPES), ids=list(RECIPES))
@pytest.mark.parametrize("splits_on", ["host", "device"])
def test_dependent_launch_gives_the_bits_of_stream_order(recipe, splits_on, gen, seed,
                                                         restore_switch):
    rows = 640
    splits = make_splits(gen, rows, G, "random_with_zeros")
    assert 0 in splits
    x = randn(gen, rows, WIDTH, dtype=torch.bfloat16, device="cuda")
    dy = randn(gen, rows, WIDTH, dtype=torch.bfloat16, device="cuda")

    def run(enabled):
        """Three steps of fresh layers (fresh FP8 states), nothing synchronised."""
        ops.set_dependent_launch(enabled)
        layers = _layers(seed)
        results = []
        for _ in range(3):
            # Device sizes from a torch kernel queued just before the first cast.
            m = torch.tensor(splits, device="cuda") * 1 if splits_on == "device" else splits
            results.append(_chain_step(layers, x, m, dy, RECIPES[recipe]))
        torch.cuda.synchronize()
        return results

    plain, dependent = run(False), run(True)
    for step, (a_run, b_run) in enumerate(zip(plain, dependent)):
        for i, (a, b) in enumerate(zip(a_run, b_run)):
            assert a is not None and b is not None, (step, i)
            assert torch.isfinite(a.float()).all(), (step, i)
            assert torch.equal(a, b), f"step {step}, tensor {i}: dependent launch changed the bits"


@needs_sm90
@pytest.mark.parametrize("recipe", ["bf16", "fp8_current"])
def test_dependent_launch_in_a_cuda_graph(recipe, gen, seed, restore_switch):
    """A captured chain of forwards replays the eager chain's bits: the
    launches' programmatic edges are kept in the graph. (Current scaling:
    each call's scales come from its own operands, so every call of the same
    input gives the same bits.)"""
    layers = _layers(seed)
    splits = make_splits(gen, 512, G, "random_with_zeros")
    x = randn(gen, 512, WIDTH, dtype=torch.bfloat16, device="cuda")
    factory = RECIPES[recipe]

    def forward(inp):
        region = (grouped_linear.autocast(recipe=factory()) if factory
                  else grouped_linear.autocast(enabled=False))
        with torch.no_grad(), region:
            h = inp
            for layer in layers:
                h = layer(h, splits, is_first_microbatch=False if factory else None)
            return h

    ops.set_dependent_launch(False)
    if factory:
        with torch.no_grad(), grouped_linear.autocast(recipe=factory()):
            for layer in layers:  # the FP8 weights, cached for every call below
                layer(x, splits, is_first_microbatch=True)
    expected = forward(x)
    ops.set_dependent_launch(True)
    static_x = x.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        forward(static_x)  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = forward(static_x)
    static_out.fill_(float("nan"))  # poisoned: the replay must write every element
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out, expected)
