"""CUDA graph capture of GroupedLinear forward+backward with device m_splits.

The grouped engine reads group sizes on the device, so a captured graph can be
replayed with new split values written into the same tensor. The cuBLAS engine
reads them back to the host (a sync, not capturable), so these tests need an
engine without host sync.
"""

import pytest
import torch

import grouped_linear as gl

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# bf16 outputs: half an ulp of bf16 is 2^-8 relative; norm-wise errors land near 2e-3.
BF16_TOLERANCE = 1e-2


def _sync_free_engine():
    engine = gl.engine_for("cuda")
    if engine == "cublas":
        pytest.skip("the default engine (cublas) reads device m_splits back with a sync")
    return engine


def _random_splits(generator, groups, rows):
    # Random cut points give random sizes, zero-size groups included.
    cuts = torch.sort(torch.randint(0, rows + 1, (groups - 1,), generator=generator)).values
    edges = torch.cat([torch.tensor([0]), cuts, torch.tensor([rows])])
    splits = edges[1:] - edges[:-1]
    splits[1] = 0  # always at least one empty group
    splits[0] += rows - int(splits.sum())
    return splits


def _reference(x, weight, bias, dy, splits):
    """float64 forward and gradients of the per-expert linear."""
    x64 = x.detach().double().requires_grad_()
    w64 = weight.detach().double().requires_grad_()
    b64 = bias.detach().double().requires_grad_()
    outs, start = [], 0
    for g, rows in enumerate(splits.tolist()):
        outs.append(x64[start:start + rows] @ w64[g].T + b64[g])
        start += rows
    y64 = torch.cat(outs)
    y64.backward(dy.double())
    return y64, x64.grad, w64.grad, b64.grad


def _rel(a, b):
    return ((a.double() - b).norm() / b.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("splits_dtype", [torch.int64, torch.int32])
def test_graph_replay_follows_new_inputs_and_splits(splits_dtype):
    _sync_free_engine()
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1234)
    groups, k, n, rows = 8, 128, 64, 384
    module = gl.GroupedLinear(groups, k, n, params_dtype=torch.bfloat16, device="cuda")
    with torch.no_grad():
        module.bias.normal_()
    x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16)
    splits = _random_splits(generator, groups, rows).to("cuda", splits_dtype)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch recommends
        for _ in range(2):
            module(x, splits).backward(dy)
    torch.cuda.current_stream().wait_stream(side)

    x.grad = module.weight.grad = module.bias.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_static = module(x, splits)
        y_static.backward(dy)

    for _ in range(3):
        new_splits = _random_splits(generator, groups, rows)
        splits.copy_(new_splits.to(splits_dtype))
        with torch.no_grad():
            x.copy_(torch.randn_like(x))
        dy.copy_(torch.randn_like(dy))
        graph.replay()
        torch.cuda.synchronize()
        y_ref, dx_ref, dw_ref, db_ref = _reference(x.cpu(), module.weight.cpu(),
                                                   module.bias.cpu(), dy.cpu(), new_splits)
        assert _rel(y_static.cpu(), y_ref) < BF16_TOLERANCE
        assert _rel(x.grad.cpu(), dx_ref) < BF16_TOLERANCE
        assert _rel(module.weight.grad.cpu(), dw_ref) < BF16_TOLERANCE
        assert _rel(module.bias.grad.cpu(), db_ref) < BF16_TOLERANCE
        # Empty groups get exactly zero weight and bias gradients.
        empty = (new_splits == 0).nonzero().flatten().tolist()
        assert empty
        for g in empty:
            assert torch.count_nonzero(module.weight.grad[g]) == 0
            assert torch.count_nonzero(module.bias.grad[g]) == 0
