"""CPU: how FP8 layers replayed from a CUDA graph keep their delayed scaling
moving. A replayed forward runs no host code, so it registers nothing with
the autocast region; `ModuleState.join_region` registers a state without a
forward, and `grouped_linear.make_graphed_callables` calls it for every layer
of a graphed callable (the graphs themselves: test_cuda_graphs.py)."""

import pytest
import torch

import grouped_linear
from grouped_linear import fp8, graphs
from gl_testutil import randn, set_params

RECIPE = fp8.DelayedScaling(amax_history_len=4)


def _module_after_one_step(gen):
    module = grouped_linear.GroupedLinear(3, 16, 16, device="cpu")  # (default: cuda where present)
    set_params(module, gen)
    with torch.no_grad(), grouped_linear.autocast(recipe=RECIPE):
        module(randn(gen, 12, 16), [5, 0, 7])
    return module


def _history(module):
    return module._fp8_state.amax_history_fwd.clone()


def test_join_region_runs_the_step_boundary_without_a_forward(gen):
    module = _module_after_one_step(gen)
    before = _history(module)
    assert before[1].abs().sum() > 0 and before[0].abs().sum() == 0  # the first step's amaxes
    with grouped_linear.autocast(recipe=RECIPE):  # a region the module did not run in
        pass
    assert torch.equal(_history(module), before), "a region without the module updated it"
    module._fp8_state.join_region()  # outside any region: nothing to join
    assert torch.equal(_history(module), before)
    with grouped_linear.autocast(recipe=RECIPE):
        module._fp8_state.join_region()
        module._fp8_state.join_region()  # joining twice registers once
    after = _history(module)
    # One roll: the amaxes moved one row down.
    assert torch.equal(after[2], before[1]) and after[:2].abs().sum() == 0


def test_graphed_call_joins_the_region_first(gen):
    """The wrapper make_graphed_callables puts around each graphed callable,
    here around an eager stand-in for a replay (which records no amax)."""
    module = _module_after_one_step(gen)
    before = _history(module)
    replay = graphs._joining(lambda x: x, graphs._fp8_states(module), fp8_enabled=True)
    with pytest.raises(RuntimeError, match="captured with fp8_enabled=True; call it inside "
                                           "grouped_linear.autocast"):
        replay(torch.ones(1))
    assert torch.equal(_history(module), before)
    with grouped_linear.autocast(recipe=RECIPE):
        assert torch.equal(replay(torch.ones(1)), torch.ones(1))
    assert torch.equal(_history(module)[2], before[1]), "the region's exit did not update it"
    # Layers nested in a model are all found; plain functions hold none.
    model = torch.nn.Sequential(module, torch.nn.ReLU(), grouped_linear.Linear(16, 8, device="cpu"))
    assert len(graphs._fp8_states(model)) == 2
    assert graphs._fp8_states(lambda x: x) == []


def test_make_graphed_callables_checks_its_fp8_arguments(gen):
    module = _module_after_one_step(gen)
    sample = (randn(gen, 12, 16),)
    with pytest.raises(TypeError, match="fp8_enabled: got 1, expected a bool"):
        grouped_linear.make_graphed_callables(module, sample, fp8_enabled=1)
    with pytest.raises(ValueError, match="fp8_recipe is given but fp8_enabled is False"):
        grouped_linear.make_graphed_callables(module, sample, fp8_recipe=RECIPE)
    # Refused before torch was called: the module is as it was and works.
    assert "forward" not in vars(module), "the module's forward was replaced"
    with grouped_linear.autocast(recipe=RECIPE):
        assert module(sample[0], [5, 0, 7]).shape == (12, 16)


def test_fp8_join_region_takes_modules_and_their_layers(gen):
    """The public form, for graphs made another way (hand-captured, or by a
    tool that replays graphs): every layer found in the given
    modules joins the region; anything but a module is refused up front."""
    first, second = _module_after_one_step(gen), _module_after_one_step(gen)
    model = torch.nn.ModuleList([torch.nn.Sequential(first), torch.nn.ReLU()])
    before = [_history(first), _history(second)]
    with pytest.raises(TypeError, match="join_region: got function, expected torch.nn.Module"):
        with grouped_linear.autocast(recipe=RECIPE):
            fp8.join_region(model, lambda x: x)
    assert torch.equal(_history(first), before[0]), "a refused call joined a layer"
    with grouped_linear.autocast(recipe=RECIPE):
        fp8.join_region(model)
    assert torch.equal(_history(first)[2], before[0][1])
    assert torch.equal(_history(second), before[1]), "a layer not given was updated"
