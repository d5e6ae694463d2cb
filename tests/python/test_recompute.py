"""grouped_linear.activation_checkpoint: activation recomputation that runs
the layers as their forward ran, FP8 included, on every engine (the CPU
engine and FP8 emulation in CI; the CUDA engines on a GPU).

Checked against the same step without checkpointing, on a copy of the same
model and FP8 state: output, every gradient and the FP8 state after the step
equal bit for bit. Backward runs after the autocast region has exited (the
usual order): its exit has updated delayed scaling's scales, and a
recomputation under the new scales, or one that recorded its amaxes again,
would differ."""

import copy

import pytest
import torch

import grouped_linear
from grouped_linear import fp8
from gl_testutil import randn, set_params

SPLITS = [5, 0, 7]
RECIPES = {"delayed": lambda: fp8.DelayedScaling(amax_history_len=4),
           "current": fp8.Float8CurrentScaling,
           "block": fp8.Float8BlockScaling,
           "bf16": lambda: None}


def _model(gen, device="cpu"):
    layers = torch.nn.ModuleList([grouped_linear.GroupedLinear(3, 32, 48, device=device),
                                  grouped_linear.GroupedLinear(3, 48, 32, device=device)])
    for layer in layers:
        set_params(layer, gen)
    return layers


def _two_layers(model, x):
    return model[1](torch.nn.functional.gelu(model[0](x, SPLITS)), SPLITS)


def _region(recipe):
    return grouped_linear.autocast(enabled=recipe is not None, recipe=recipe)


def _state(model):
    return [torch.as_tensor(layer.get_extra_state()).clone() for layer in model]


@pytest.mark.parametrize("recipe_name", list(RECIPES))
def test_recomputed_step_equals_the_plain_step(device, recipe_name, gen):
    recipe = RECIPES[recipe_name]()
    model = _model(gen, device)
    for scale in (1.0, 2.0):  # a history for delayed scaling
        with _region(recipe):
            out = _two_layers(model, randn(gen, 12, 32, scale=scale, device=device))
        out.sum().backward()
    twin = copy.deepcopy(model)
    model.zero_grad(set_to_none=True)
    twin.zero_grad(set_to_none=True)
    # Larger inputs than before: this step's boundary changes the scales.
    x = randn(gen, 12, 32, scale=7.0, device=device).requires_grad_(True)
    x_twin = x.detach().clone().requires_grad_(True)
    dy = randn(gen, 12, 32, device=device)
    with _region(recipe):
        out = _two_layers(model, x)
        forward_scales = [layer._fp8_state.scale_fwd for layer in model]
        forward_scales = [None if s is None else s.clone() for s in forward_scales]
    out.backward(dy)
    if recipe_name == "delayed":  # the case a recomputation must not follow
        assert not torch.equal(model[0]._fp8_state.scale_fwd, forward_scales[0]), \
            "the boundary left the scales as they were: the test would not tell"
    with _region(recipe):
        out_twin = grouped_linear.activation_checkpoint(_two_layers, twin, x_twin)
    out_twin.backward(dy)
    assert torch.equal(out, out_twin)
    assert torch.equal(x.grad, x_twin.grad), "dx differs"
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert torch.equal(p.grad, q.grad), f"grad of {name} differs"
    for a, b in zip(_state(model), _state(twin)):
        assert torch.equal(a, b), "the FP8 state differs after the step"


def test_recomputation_on_another_thread_inside_the_region(gen):
    """On CUDA the autograd engine runs backward, and so the recomputation, on
    its own thread, possibly while the step's region (on the caller's thread)
    still holds the layers' FP8 state: the recomputation must run there all
    the same, and give the plain step's gradients. Backward is run from a
    second thread here to do the same on the CPU."""
    import threading
    recipe = fp8.DelayedScaling(amax_history_len=4)
    model = _model(gen)
    twin = copy.deepcopy(model)
    x = randn(gen, 12, 32).requires_grad_(True)
    x_twin = x.detach().clone().requires_grad_(True)
    dy = randn(gen, 12, 32)
    errors = []

    def backward(out):
        try:
            out.backward(dy)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    for module, inp, checkpointed in ((model, x, False), (twin, x_twin, True)):
        with _region(recipe):
            out = (grouped_linear.activation_checkpoint(_two_layers, module, inp) if checkpointed
                   else _two_layers(module, inp))
            worker = threading.Thread(target=backward, args=(out,))
            worker.start()
            worker.join()
    assert not errors, errors
    assert torch.equal(x.grad, x_twin.grad)
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p.grad, q.grad)


def test_plain_checkpoint_after_the_region_is_refused_by_torch(gen):
    """Why activation_checkpoint exists: torch.utils.checkpoint recomputes
    outside the region, without FP8, and its check finds other saved tensors."""
    model = _model(gen)
    with _region(fp8.DelayedScaling()):
        out = torch.utils.checkpoint.checkpoint(_two_layers, model, randn(gen, 12, 32),
                                                use_reentrant=False)
    with pytest.raises(torch.utils.checkpoint.CheckpointError):
        out.sum().backward()


def test_activation_checkpoint_refuses_what_it_does_not_do(gen):
    model = _model(gen)
    x = randn(gen, 12, 32)
    with pytest.raises(ValueError, match="use_reentrant: got True, expected False"):
        grouped_linear.activation_checkpoint(_two_layers, model, x, use_reentrant=True)
    with pytest.raises(ValueError, match="context_fn is set by activation_checkpoint"):
        grouped_linear.activation_checkpoint(_two_layers, model, x, context_fn=None)
    # Refused before anything ran: the same call without the bad argument works.
    x = x.requires_grad_(True)
    grouped_linear.activation_checkpoint(_two_layers, model, x).sum().backward()
    assert x.grad is not None and model[0].weight.grad is not None
