"""Migration check: a training script written against Transformer Engine's
public GroupedLinear API runs unchanged on grouped_linear.

`te_script` is the script: it only ever touches the module namespace it is
given (`te_like`), and only through what TE's `transformer_engine.pytorch`
offers: the constructor arguments (keywords after the first three, as TE's
fourth positional is `sequence_parallel`), `forward(inp, m_splits,
is_first_microbatch=None)`, per-expert `weight{i}` / `bias{i}` state_dict
keys, Megatron's `main_grad` protocol under fuse_wgrad_accumulation (set on
every parameter; `is_first_microbatch=True` overwrites it, later micro-batches
add to it), and `delay_wgrad_compute` with `backward_dw()`. It reads
gradients without assuming the parameter layout: dgrad from the input, the
weight gradients through a plain SGD step read back per expert from the
state_dict. Every check is against a float64 reference computed here.

The test calls it with `grouped_linear`; on a machine with Transformer Engine
and a GPU, the same function also runs on `transformer_engine.pytorch`.
"""

import functools

import pytest
import torch

import grouped_linear
from conftest import TOLERANCE
from gl_testutil import assert_close_rel

G, HIDDEN, FFN = 4, 32, 48
LR = 0.5
MICRO_BATCHES = [[10, 0, 25, 5], [7, 13, 0, 20]]  # both have an empty expert


def _reference(experts, x, splits, target):
    """float64 on the CPU: fc2(gelu(fc1(x))) per expert, its loss gradients."""
    x64 = x.detach().to("cpu", torch.float64).requires_grad_(True)
    params = {k: v.detach().to("cpu", torch.float64).requires_grad_(True)
              for k, v in experts.items()}
    rows, out = 0, []
    for i, m in enumerate(splits):
        h = x64[rows:rows + m] @ params[f"fc1.weight{i}"].T + params[f"fc1.bias{i}"]
        out.append(torch.nn.functional.gelu(h) @ params[f"fc2.weight{i}"].T)
        rows += m
    y = torch.cat(out)
    (y * target.to("cpu", torch.float64)).sum().backward()
    return y.detach(), x64.grad, {k: p.grad for k, p in params.items()}


def te_script(te_like, device, dtype):
    """The TE user's script. Returns nothing; asserts as it goes."""
    # Two roundings of the dtype's budget (conftest.py): the hidden layer is
    # rounded before the activation, the step after the update.
    tol = 2 * TOLERANCE[dtype]
    gen = torch.Generator().manual_seed(2024)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=dtype)

    init = functools.partial(torch.nn.init.normal_, mean=0.0, std=0.02)
    fc1 = te_like.GroupedLinear(G, HIDDEN, FFN, bias=True, params_dtype=dtype, device=device,
                                init_method=init, return_bias=False, sequence_parallel=False,
                                tp_size=1, parallel_mode=None, get_rng_state_tracker=None,
                                rng_tracker_name=None, save_original_input=False,
                                ub_overlap_rs=False, ub_overlap_ag=False, ub_name=None)
    fc2 = te_like.GroupedLinear(G, FFN, HIDDEN, bias=False, params_dtype=dtype, device=device,
                                init_method=init, fuse_wgrad_accumulation=True,
                                delay_wgrad_compute=True, tp_group=None, tp_size=1)

    # Per-expert checkpoint keys, loaded from a per-expert checkpoint.
    sd1, sd2 = fc1.state_dict(), fc2.state_dict()
    assert {k for k in sd1 if k != "_extra_state"} == (
        {f"weight{i}" for i in range(G)} | {f"bias{i}" for i in range(G)})
    assert {k for k in sd2 if k != "_extra_state"} == {f"weight{i}" for i in range(G)}
    experts = {}
    for i in range(G):
        experts[f"fc1.weight{i}"] = rand(FFN, HIDDEN, scale=HIDDEN ** -0.5)
        experts[f"fc1.bias{i}"] = rand(FFN, scale=0.5)
        experts[f"fc2.weight{i}"] = rand(HIDDEN, FFN, scale=FFN ** -0.5)
    for key in sd1:
        if key != "_extra_state":
            sd1[key] = experts["fc1." + key]
    for key in sd2:
        if key != "_extra_state":
            sd2[key] = experts["fc2." + key]
    fc1.load_state_dict(sd1)
    fc2.load_state_dict(sd2)
    loaded = fc1.state_dict()
    for i in range(G):
        assert torch.equal(loaded[f"weight{i}"], experts[f"fc1.weight{i}"])
        assert torch.equal(loaded[f"bias{i}"], experts[f"fc1.bias{i}"])

    # Megatron's protocol: an fp32 main_grad on every parameter of the fused
    # module, holding garbage the first micro-batch overwrites.
    for p in fc2.parameters():
        p.main_grad = torch.full(p.shape, 1.0e4, dtype=torch.float32, device=device)

    grads = {k: 0.0 for k in experts}
    for index, splits in enumerate(MICRO_BATCHES):
        first = index == 0
        rows = sum(splits)
        x = rand(rows, HIDDEN).requires_grad_(True)
        target = rand(rows, HIDDEN)
        h = fc1(x, splits, is_first_microbatch=first)
        y = fc2(torch.nn.functional.gelu(h), splits, is_first_microbatch=first)
        (y * target).float().sum().backward()

        y_ref, dx_ref, grads_ref = _reference(experts, x, splits, target)
        assert_close_rel(y, y_ref, dtype, f"micro-batch {index}: output", tol=tol)
        assert_close_rel(x.grad, dx_ref, dtype, f"micro-batch {index}: grad_input", tol=tol)
        # delay_wgrad_compute: backward left fc2's weight gradient (and
        # main_grad) alone; backward_dw computes it.
        for p in fc2.parameters():
            assert p.grad is None
            if first:
                assert torch.equal(p.main_grad, torch.full_like(p.main_grad, 1.0e4))
        fc2.backward_dw()
        for k in grads:
            grads[k] = grads[k] + grads_ref[k]

    # A plain SGD step (main_grad for fc2, .grad for fc1), then the new
    # weights per expert against the float64 step.
    with torch.no_grad():
        for p in fc1.parameters():
            p -= LR * p.grad
        for p in fc2.parameters():
            assert p.grad is None
            p -= LR * p.main_grad.to(p.dtype)
    stepped = {**{"fc1." + k: v for k, v in fc1.state_dict().items()},
               **{"fc2." + k: v for k, v in fc2.state_dict().items()}}
    for key, value in experts.items():
        expected_step = -LR * grads[key]
        actual_step = stepped[key].to("cpu", torch.float64) - value.to("cpu", torch.float64)
        assert_close_rel(actual_step, expected_step, dtype, f"SGD step of {key}", tol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_te_script_runs_on_grouped_linear(device, dtype):
    te_script(grouped_linear, device, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_te_script_is_valid_transformer_engine_code(dtype):
    """The same script on Transformer Engine itself, where it is installed
    (it needs a GPU): the script uses TE's API, not grouped_linear's."""
    te = pytest.importorskip("transformer_engine.pytorch")
    if not torch.cuda.is_available():
        pytest.skip("Transformer Engine needs CUDA")
    te_script(te, "cuda", dtype)
