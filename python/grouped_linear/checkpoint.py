"""Per-expert checkpoint names for the fused [G, N, K] parameters, and the
FP8 state key `_extra_state`.

GroupedLinear keeps one `weight` [G, N, K] (and one `bias` [G, N]) for speed,
but its state_dict speaks the common per-expert naming: `weight0` ...
`weight{G-1}`, `bias0` ... . Loading accepts that naming (and the fused one),
reports missing experts by their per-expert names, and leaves the module
unchanged when it rejects a checkpoint for mismatched shapes or mixed naming.
"""

import torch

_FUSED = ("weight", "bias")


def save_per_expert(module, state_dict, prefix, local_metadata):
    """state_dict post-hook: split each fused parameter into per-expert keys."""
    for name in _FUSED:
        key = prefix + name
        if key not in state_dict:
            continue
        fused = state_dict.pop(key)
        for index, expert in enumerate(fused.unbind(0)):
            state_dict[f"{key}{index}"] = expert


def load_per_expert(module, state_dict, prefix, local_metadata, strict, missing_keys,
                    unexpected_keys, error_msgs):
    """load_state_dict pre-hook: stack per-expert keys back into the fused one."""
    rejected = False
    for name in _FUSED:
        param = getattr(module, name, None)
        if param is None:
            continue
        fused_key = prefix + name
        expert_keys = [f"{fused_key}{i}" for i in range(module.num_gemms)]
        present = [k for k in expert_keys if k in state_dict]
        if fused_key in state_dict:
            if present:
                for key in present:
                    state_dict.pop(key)
                error_msgs.append(f"both {fused_key} and per-expert {name}N keys are present; "
                                  "expected one naming")
                rejected = True
            elif tuple(state_dict[fused_key].shape) != tuple(param.shape):
                error_msgs.append(f"size mismatch for {fused_key}: copying a param with shape "
                                  f"{tuple(state_dict[fused_key].shape)} from checkpoint, the "
                                  f"shape in current model is {tuple(param.shape)}")
                rejected = True
            continue
        if len(present) != len(expert_keys):
            for key in present:
                state_dict.pop(key)
            # Reported by their per-expert names; like any missing key, this
            # raises under strict loading (torch passes strict=True to every
            # hook, so the hook cannot tell the two apart).
            missing_keys.extend(k for k in expert_keys if k not in present)
            state_dict[fused_key] = param.detach()  # keeps the module's values
            continue
        expected = tuple(param.shape[1:])
        experts = [state_dict.pop(k) for k in expert_keys]
        bad = [(k, tuple(t.shape)) for k, t in zip(expert_keys, experts)
               if tuple(t.shape) != expected]
        if bad:
            key, shape = bad[0]
            error_msgs.append(f"size mismatch for {key}: copying a param with shape {shape} "
                              f"from checkpoint, the shape in current model is {expected}")
            state_dict[fused_key] = param.detach()
            rejected = True
            continue
        state_dict[fused_key] = torch.stack(experts, 0)
    if rejected:
        # A rejected checkpoint changes none of this module's parameters.
        for name in _FUSED:
            param = getattr(module, name, None)
            if param is not None:
                state_dict[prefix + name] = param.detach()


def fill_missing_extra_state(module, state_dict, prefix, local_metadata, strict, missing_keys,
                             unexpected_keys, error_msgs):
    """load_state_dict pre-hook: a checkpoint without `_extra_state` (written
    before FP8 state existed, or by a per-expert implementation) loads as one
    with no FP8 state, also under strict loading: the module's FP8 state
    starts afresh, as it should for new weights.

    Then the whole checkpoint is checked before torch copies anything (torch
    copies every parameter whose shape fits, then sets the extra state, which
    raises on its own): a parameter of the wrong shape or an FP8 state for
    another group count is reported among torch's error messages and leaves
    every parameter and the FP8 state as they were. While another thread's
    autocast region holds the module's FP8 state the load is refused
    (RuntimeError) before anything is copied."""
    module._fp8_state.check_free_to_load()
    key = prefix + "_extra_state"
    state_dict.setdefault(key, None)
    rejected = False
    for name in _FUSED:  # Linear's own keys (GroupedLinear's: load_per_expert)
        param = getattr(module, name, None)
        value = state_dict.get(prefix + name)
        if (param is not None and isinstance(value, torch.Tensor)
                and tuple(value.shape) != tuple(param.shape) and not hasattr(module, "num_gemms")):
            rejected = True  # torch reports the size mismatch itself
    extra = state_dict[key]
    if extra is not None:
        try:  # a scratch state: the module's own is not touched by the check
            type(module._fp8_state)(getattr(module, "num_gemms", 1),
                                    type(module).__name__).load_state_dict(extra)
        except (TypeError, ValueError) as e:
            error_msgs.append(str(e).replace("grouped_linear: ", "", 1))
            rejected = True
    if rejected:
        state_dict[key] = module.get_extra_state()
        for name in _FUSED:
            param = getattr(module, name, None)
            if param is not None and tuple(state_dict.get(prefix + name, param).shape) == \
                    tuple(param.shape):
                state_dict[prefix + name] = param.detach()
