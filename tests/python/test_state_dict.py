"""Checkpoints: per-expert state_dict names, round trips and bad checkpoints."""

import io

import pytest
import torch
import torch.nn.functional as F

import grouped_linear
from gl_testutil import (DTYPE_IDS, DTYPES, assert_close_rel, make_splits, randn, ref_forward,
                         set_params, snapshot)

G, K, N = 4, 37, 23


def _module(device, gen=None, dtype=torch.float32, **kwargs):
    module = grouped_linear.GroupedLinear(G, K, N, params_dtype=dtype, device=device, **kwargs)
    if gen is not None:
        set_params(module, gen)
    return module


def _expected_keys(bias=True, prefix=""):
    keys = [f"{prefix}weight{g}" for g in range(G)]
    if bias:
        keys += [f"{prefix}bias{g}" for g in range(G)]
    # The FP8 state (amax histories, scales) under Transformer Engine's key.
    keys.append(f"{prefix}_extra_state")
    return keys


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
def test_state_dict_keys_are_per_expert(device, with_bias, gen):
    module = _module(device, gen, bias=with_bias)
    sd = module.state_dict()
    assert sorted(sd) == sorted(_expected_keys(with_bias))
    for g in range(G):
        assert sd[f"weight{g}"].shape == (N, K)
        assert torch.equal(sd[f"weight{g}"], module.weight[g])
        assert not sd[f"weight{g}"].requires_grad
        if with_bias:
            assert sd[f"bias{g}"].shape == (N,)
            assert torch.equal(sd[f"bias{g}"], module.bias[g])


def test_state_dict_keys_nested_prefix(device, gen):
    parent = torch.nn.Module()
    parent.experts = _module(device, gen)
    sd = parent.state_dict()
    assert sorted(sd) == sorted(_expected_keys(prefix="experts."))
    fresh = torch.nn.Module()
    fresh.experts = _module(device)
    assert not fresh.load_state_dict(sd).missing_keys
    assert torch.equal(fresh.experts.weight, parent.experts.weight)
    assert torch.equal(fresh.experts.bias, parent.experts.bias)


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_round_trip_into_fresh_module(device, dtype, with_bias, gen):
    source = _module(device, gen, dtype, bias=with_bias)
    target = _module(device, dtype=dtype, bias=with_bias)
    result = target.load_state_dict(source.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    assert torch.equal(target.weight, source.weight)
    if with_bias:
        assert torch.equal(target.bias, source.bias)
    splits = make_splits(gen, 40, G, "random_with_zeros")
    x = randn(gen, 40, K, dtype=dtype, device=device)
    with torch.no_grad():
        assert torch.equal(target(x, splits), source(x, splits))


def test_load_does_not_alias_or_mutate_the_checkpoint(device, gen):
    source = _module(device, gen)
    sd = source.state_dict()
    sd = {k: v.clone() for k, v in sd.items()}
    keys = list(sd)
    target = _module(device)
    target.load_state_dict(sd)
    assert list(sd) == keys, "load_state_dict changed the caller's dict"
    with torch.no_grad():
        sd["weight0"].zero_()
    assert torch.count_nonzero(target.weight[0]) > 0, "module weight aliases the checkpoint"


def test_torch_save_load_bytesio(device, gen):
    source = _module(device, gen, torch.bfloat16)
    buffer = io.BytesIO()
    torch.save(source.state_dict(), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True, map_location=device)
    assert sorted(loaded) == sorted(_expected_keys())
    target = _module(device, dtype=torch.bfloat16)
    target.load_state_dict(loaded)
    assert torch.equal(target.weight, source.weight)
    assert torch.equal(target.bias, source.bias)


def test_load_per_expert_checkpoint_from_loop_implementation(device, gen):
    """A checkpoint of G separate nn.Linear experts, keyed weight{i}/bias{i} as
    per-expert implementations (e.g. TE's GroupedLinear) write it."""
    experts = [torch.nn.Linear(K, N) for _ in range(G)]
    for e in experts:
        set_params(e, gen)
    checkpoint = {}
    for i, e in enumerate(experts):
        checkpoint[f"weight{i}"] = e.weight.detach().clone()
        checkpoint[f"bias{i}"] = e.bias.detach().clone()
    module = _module(device)
    result = module.load_state_dict(checkpoint, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    splits = make_splits(gen, 50, G, "random_with_zeros")
    x = randn(gen, 50, K)
    expected = torch.cat([F.linear(rows, e.weight, e.bias) for rows, e in
                          zip(torch.split(x, splits), experts)]).detach()
    with torch.no_grad():
        out = module(x.to(device), splits)
    assert_close_rel(out, expected, torch.float32, "loaded per-expert checkpoint")


def test_load_float32_checkpoint_into_bf16_module(device, gen):
    source = _module(device, gen, torch.float32)
    target = _module(device, dtype=torch.bfloat16)
    target.load_state_dict(source.state_dict())
    assert target.weight.dtype == torch.bfloat16
    assert torch.equal(target.weight, source.weight.detach().to(torch.bfloat16))


def test_load_fused_names(device, gen):
    source = _module(device, gen)
    fused = {"weight": source.weight.detach().clone(), "bias": source.bias.detach().clone()}
    target = _module(device)
    result = target.load_state_dict(fused, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    assert torch.equal(target.weight, source.weight)


def test_load_assign_onto_meta_module(device, gen):
    source = _module(device, gen)
    target = grouped_linear.GroupedLinear(G, K, N, device="meta")
    target.load_state_dict(source.state_dict(), assign=True)
    assert target.weight.device.type == device
    assert isinstance(target.weight, torch.nn.Parameter)
    assert torch.equal(target.weight, source.weight)
    x = randn(gen, 8, K, device=device)
    with torch.no_grad():
        assert torch.equal(target(x, [8, 0, 0, 0]), source(x, [8, 0, 0, 0]))


def test_linear_state_dict_matches_nn_linear(device, gen):
    reference = torch.nn.Linear(K, N)
    set_params(reference, gen)
    module = grouped_linear.Linear(K, N, device=device)
    assert sorted(module.state_dict()) == ["_extra_state", "bias", "weight"]
    module.load_state_dict(reference.state_dict())
    x = randn(gen, 5, K)
    with torch.no_grad():
        assert_close_rel(module(x.to(device)), reference(x), torch.float32, "Linear after load")


# --- bad checkpoints ---------------------------------------------------------------

def _bad_checkpoint(case, source):
    sd = {k: v.clone() for k, v in source.state_dict().items()}
    if case == "weight_wrong_shape":
        sd["weight1"] = torch.zeros(N, K + 1)
        return sd, r"weight1.*\(23, 38\).*\(23, 37\)"
    if case == "weight_wrong_out_features":
        sd["weight3"] = torch.zeros(N + 2, K)
        return sd, "weight3"
    if case == "bias_wrong_shape":
        sd["bias0"] = torch.zeros(N - 1)
        return sd, "bias0"
    if case == "missing_weight_expert":
        del sd["weight2"]
        return sd, "weight2"
    if case == "missing_bias_expert":
        del sd["bias3"]
        return sd, "bias3"
    if case == "extra_expert":
        sd[f"weight{G}"] = torch.zeros(N, K)
        return sd, f"weight{G}"
    if case == "fused_and_per_expert":
        sd["weight"] = torch.zeros(G, N, K)
        return sd, "weight"
    if case == "fused_wrong_groups":
        for g in range(G):
            del sd[f"weight{g}"]
        sd["weight"] = torch.zeros(G + 1, N, K)
        return sd, "weight"
    raise ValueError(case)


BAD_CASES = ["weight_wrong_shape", "weight_wrong_out_features", "bias_wrong_shape",
             "missing_weight_expert", "missing_bias_expert", "extra_expert",
             "fused_and_per_expert", "fused_wrong_groups"]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_checkpoint_strict_fails_clearly(device, case, gen):
    source = _module(device, gen)
    target = _module(device, gen)
    checkpoint, pattern = _bad_checkpoint(case, source)
    touched = "bias" if case.startswith(("bias", "missing_bias")) else "weight"
    before = snapshot(getattr(target, touched))
    with pytest.raises(RuntimeError, match=pattern):
        target.load_state_dict(checkpoint, strict=True)
    if case not in ("extra_expert", "fused_and_per_expert"):  # the latter: see below
        # The parameter the checkpoint got wrong keeps every expert's value.
        assert torch.equal(getattr(target, touched), before[0]), f"{touched} was changed"
    # And the module still works.
    x = randn(gen, 12, K, device=device)
    with torch.no_grad():
        out = target(x, [3, 3, 3, 3])
    assert_close_rel(out, ref_forward(x, target.weight, target.bias, [3, 3, 3, 3]),
                     torch.float32, "forward after failed load")


# Missing keys follow torch's own semantics (the rest loads, then strict
# raises); shape and naming errors leave the whole module unchanged.
@pytest.mark.parametrize("case", ["weight_wrong_shape", "fused_wrong_groups"])
def test_bad_checkpoint_leaves_all_parameters_unchanged(device, case, gen):
    source = _module(device, gen)
    target = _module(device, gen)
    checkpoint, _ = _bad_checkpoint(case, source)
    before = snapshot(target.weight, target.bias)
    with pytest.raises(RuntimeError):
        target.load_state_dict(checkpoint, strict=True)
    assert torch.equal(target.weight, before[0]), "weight changed"
    assert torch.equal(target.bias, before[1]), "bias changed by a failed load"


def test_fused_and_per_expert_conflict_leaves_weight_unchanged(device, gen):
    source = _module(device, gen)
    target = _module(device, gen)
    checkpoint, _ = _bad_checkpoint("fused_and_per_expert", source)
    before = snapshot(target.weight)
    with pytest.raises(RuntimeError, match="both weight and per-expert"):
        target.load_state_dict(checkpoint, strict=True)
    assert torch.equal(target.weight, before[0]), "weight overwritten by a rejected checkpoint"


def test_missing_everything_strict(device, gen):
    target = _module(device, gen)
    before = snapshot(target.weight, target.bias)
    with pytest.raises(RuntimeError, match="Missing key"):
        target.load_state_dict({}, strict=True)
    assert torch.equal(target.weight, before[0]) and torch.equal(target.bias, before[1])


def test_missing_expert_non_strict_reports_missing_keys(device, gen):
    source = _module(device, gen)
    target = _module(device, gen)
    checkpoint, _ = _bad_checkpoint("missing_weight_expert", source)
    result = target.load_state_dict(checkpoint, strict=False)
    assert "weight2" in result.missing_keys
    assert torch.equal(target.bias, source.bias)


def test_missing_keys_use_state_dict_names(device):
    target = _module(device)
    result = target.load_state_dict({}, strict=False)
    # `_extra_state` is never missing: a checkpoint without FP8 state (older,
    # or per-expert from another implementation) loads as "no FP8 state yet".
    expected = [k for k in _expected_keys() if k != "_extra_state"]
    assert sorted(result.missing_keys) == sorted(expected)
