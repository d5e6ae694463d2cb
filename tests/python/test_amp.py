"""torch.autocast (AMP): inside a region the modules compute in its dtype, as
torch.nn.Linear and Transformer Engine's modules do, with float32
parameters cast for the call and their gradients back in float32. Outside
one, the input must have the parameters' dtype, as before.

Reference: the same module run outside AMP on operands cast to the region's
dtype by hand (the same kernels on the same values: equal bits)."""

import copy

import pytest
import torch

import grouped_linear
from grouped_linear import fp8
from gl_testutil import randn, set_params

SPLITS = [5, 0, 7]
AMP = torch.bfloat16


def _module(device, gen, **kwargs):
    module = grouped_linear.GroupedLinear(3, 32, 16, device=device, **kwargs)
    set_params(module, gen)
    return module


def _by_hand(module):
    """The module with its parameters cast to the AMP dtype."""
    cast = copy.deepcopy(module).to(AMP)
    for p in cast.parameters():
        p.grad = None
    return cast


def test_float32_module_computes_in_the_region_dtype(device, gen):
    module = _module(device, gen)
    x = randn(gen, 12, 32, device=device).requires_grad_(True)
    dy = randn(gen, 12, 16, dtype=AMP, device=device)
    with torch.autocast(device_type=device, dtype=AMP):
        out = module(x, SPLITS)
    assert out.dtype == AMP
    out.backward(dy)
    assert module.weight.grad.dtype == torch.float32 and x.grad.dtype == torch.float32
    reference = _by_hand(module)
    x_ref = x.detach().to(AMP).requires_grad_(True)
    out_ref = reference(x_ref, SPLITS)
    out_ref.backward(dy)
    assert torch.equal(out, out_ref)
    assert torch.equal(x.grad, x_ref.grad.float())
    assert torch.equal(module.weight.grad, reference.weight.grad.float())
    assert torch.equal(module.bias.grad, reference.bias.grad.float())


def test_bf16_activations_from_amp_layers_are_taken(device, gen):
    """The usual case: the layer before ran under AMP and hands over bf16."""
    module = _module(device, gen)
    upstream = torch.nn.Linear(8, 32, device=device)
    x = randn(gen, 12, 8, device=device)
    with torch.autocast(device_type=device, dtype=AMP):
        hidden = upstream(x)
        assert hidden.dtype == AMP
        out = module(hidden, SPLITS)
    assert out.dtype == AMP
    with pytest.raises(TypeError):  # outside AMP the dtypes must agree, as before
        module(hidden.detach(), SPLITS)


def test_modules_already_in_the_region_dtype_run_as_they_are(device, gen):
    module = _module(device, gen, params_dtype=AMP)
    x = randn(gen, 12, 32, dtype=AMP, device=device)
    with torch.no_grad():
        plain = module(x, SPLITS)
        with torch.autocast(device_type=device, dtype=AMP):
            assert torch.equal(module(x, SPLITS), plain)


def test_linear_return_bias_and_delayed_wgrad_under_amp(device, gen):
    linear = grouped_linear.Linear(32, 16, device=device, return_bias=True)
    set_params(linear, gen)
    with torch.autocast(device_type=device, dtype=AMP):
        out, bias = linear(randn(gen, 6, 32, device=device))
    assert out.dtype == AMP and bias.dtype == AMP  # TE returns the bias in the activation dtype
    # delay_wgrad_compute: backward_dw sets a float32 gradient on the float32
    # weight, the one backward itself gives without the delay.
    delayed = _module(device, gen, delay_wgrad_compute=True)
    direct = _module(device, gen)
    direct.load_state_dict(delayed.state_dict())
    x = randn(gen, 12, 32, device=device)
    for module in (delayed, direct):
        with torch.autocast(device_type=device, dtype=AMP):
            out = module(x, SPLITS)
        out.float().sum().backward()
    assert delayed.weight.grad is None
    delayed.backward_dw()
    assert delayed.weight.grad.dtype == torch.float32
    assert torch.equal(delayed.weight.grad, direct.weight.grad)


def test_fp8_under_amp(device, gen):
    """FP8 autocast inside AMP: the input (and bias) in bf16, the float32
    weight quantized from its own values (no bf16 copy, one rounding); the
    output in bf16, dX and dW back in float32. Equal bits to the same module
    fed bf16 input outside AMP (the FP8 path takes mixed dtypes)."""
    module = _module(device, gen, bias=False)
    twin = copy.deepcopy(module)
    x = randn(gen, 12, 32, device=device).requires_grad_(True)
    x_twin = x.detach().to(AMP).requires_grad_(True)
    dy = randn(gen, 12, 16, dtype=AMP, device=device)
    recipe = fp8.DelayedScaling()
    with torch.autocast(device_type=device, dtype=AMP), grouped_linear.autocast(recipe=recipe):
        out = module(x, SPLITS)
    out.backward(dy)
    with grouped_linear.autocast(recipe=recipe):
        out_twin = twin(x_twin, SPLITS)
    out_twin.backward(dy)
    assert out.dtype == AMP and module.weight.grad.dtype == torch.float32
    assert torch.equal(out, out_twin)
    assert torch.equal(x.grad, x_twin.grad.float())
    assert torch.equal(module.weight.grad, twin.weight.grad)
    # With a bias: cast to the output's dtype, its gradient back in float32.
    with_bias = _module(device, gen)
    with torch.autocast(device_type=device, dtype=AMP), grouped_linear.autocast(recipe=recipe):
        out = with_bias(x.detach(), SPLITS)
    out.float().sum().backward()
    assert out.dtype == AMP and with_bias.bias.grad.dtype == torch.float32


def test_compiled_module_follows_amp_too(device, gen):
    module = _module(device, gen)
    x = randn(gen, 12, 32, device=device)
    compiled = torch.compile(lambda v: module(v, SPLITS), fullgraph=True, backend="eager")
    with torch.no_grad():
        with torch.autocast(device_type=device, dtype=AMP):
            assert torch.equal(compiled(x), module(x, SPLITS))
        assert compiled(x).dtype == torch.float32
