"""The bad-input matrix: misuse across modules (GroupedLinear, Linear),
recipes (none, delayed, current, block), autocast, m_splits, main_grad,
checkpoints and devices. Each case: the exception type and a message naming
the argument, no crash, nothing written into the module's parameters, and a
correct follow-up call (float64 reference; under FP8 against the dequantized
operands). A few rows are documented acceptances (sizes the FP8 kernels do
not take run in the emulated path; `device="cuda"` without an index).

RELIABILITY.md holds the table of these cases (scripts/reliability_report.py
renders it from what this file records under GL_RELIABILITY_OUT)."""

import re
from dataclasses import dataclass, field
from typing import Callable, Optional, Tuple, Type, Union

import pytest
import torch

import grouped_linear
from grouped_linear import fp8
from conftest import TOLERANCE
from fp8_testutil import dequantized_operands
from gl_testutil import (assert_close_rel, assert_unchanged, check_module_healthy, randn,
                         ref_dgrad, ref_forward, ref_wgrad, set_params, snapshot)
from reliability_record import record

G, K, N, T = 3, 16, 8, 9
GOOD = [4, 0, 5]

RECIPES = {
    "none": lambda: None,
    "delayed": lambda: fp8.DelayedScaling(amax_history_len=3),
    "current": lambda: fp8.Float8CurrentScaling(),
    "block": lambda: fp8.Float8BlockScaling(),
}


class Ctx:
    """The modules and inputs one case may use (fresh per case)."""

    def __init__(self, device, gen):
        self.device, self.gen = device, gen
        self.grouped = grouped_linear.GroupedLinear(G, K, N, device=device)
        set_params(self.grouped, gen)
        self.linear = grouped_linear.Linear(K, N, device=device)
        set_params(self.linear, gen)
        self.fused = grouped_linear.GroupedLinear(G, K, N, device=device,
                                                  fuse_wgrad_accumulation=True)
        set_params(self.fused, gen)
        self.fused.weight.main_grad = torch.zeros(G, N, K, device=device)

    def x(self, rows=T, k=K, dtype=torch.float32, device=None):
        return randn(self.gen, rows, k, dtype=dtype,
                     device=device or self.device).requires_grad_(True)


def _fb(module, x, *args):
    out = module(x, *args)
    (out[0] if isinstance(out, tuple) else out).sum().backward()


def _load(module, source):
    module.load_state_dict(source.state_dict())


@dataclass
class Case:
    id: str
    module: str                      # which module (or API) the case exercises
    recipe: str                      # autocast recipe around the call ("none": no autocast)
    what: str                        # the misuse, in words
    call: Callable[[Ctx], object]
    exc: Optional[Union[Type[BaseException], Tuple[Type[BaseException], ...]]]  # None: accepted
    pattern: str = ""                # regex the message must match (names the argument)
    target: str = "grouped"          # the module checked afterwards
    needs: str = ""                  # "cuda", "2gpu", "cpu_only_torch"
    prefix: bool = True              # message starts with "grouped_linear: "
    notes: str = field(default="")


def _ckpt(grouped_args, cls=grouped_linear.GroupedLinear):
    def call(c):
        source = cls(*grouped_args, device=c.device)
        module = c.grouped if cls is grouped_linear.GroupedLinear else c.linear
        _load(module, source)
    return call


def _fp8_state_from_two_groups(c):
    source = grouped_linear.GroupedLinear(2, K, N, device=c.device)
    with grouped_linear.autocast(recipe=fp8.DelayedScaling(amax_history_len=3)):
        source(c.x(rows=4), [2, 2])
    sd = c.grouped.state_dict()
    sd["_extra_state"] = source.state_dict()["_extra_state"]
    c.grouped.load_state_dict(sd)


def _exit_twice(c):
    region = grouped_linear.autocast(recipe=fp8.Float8CurrentScaling())
    region.__enter__()
    region.__exit__(None, None, None)
    region.__exit__(None, None, None)


def _cuda_no_index(c):
    module = grouped_linear.GroupedLinear(G, K, N, device="cuda")
    assert module.weight.device == torch.device("cuda", torch.cuda.current_device())
    set_params(module, c.gen)
    check_module_healthy(module, c.gen, num_gemms=G)
    # Called with a side stream current: runs there, same result.
    x = randn(c.gen, T, K, device=module.weight.device)
    expected = module(x, GOOD).detach()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.device(module.weight.device), torch.cuda.stream(stream):
        got = module(x, GOOD).detach()
    stream.synchronize()
    assert torch.equal(expected, got)


def _other_gpu_current(c):
    module = grouped_linear.GroupedLinear(G, K, N, device="cuda:0")
    set_params(module, c.gen)
    x = randn(c.gen, T, K, device="cuda:0")
    expected = module(x, GOOD).detach()
    with torch.cuda.device(1):
        got = module(x, GOOD).detach()
    assert torch.equal(expected, got)
    assert_close_rel(got, ref_forward(x, module.weight, module.bias, GOOD), torch.float32,
                     "cuda:0 module with cuda:1 current")


def _fp8_misaligned(c):
    module = grouped_linear.GroupedLinear(3, 37, 23, device=c.device)
    set_params(module, c.gen)
    recipe = fp8.Float8CurrentScaling()
    x = randn(c.gen, 20, 37, device=c.device)
    with torch.no_grad(), grouped_linear.autocast(recipe=recipe):
        y = module(x, [7, 0, 13])
    q = dequantized_operands(recipe, x, module.weight, None, [7, 0, 13])
    assert_close_rel(y, ref_forward(q["x_row"], q["w"], module.bias, [7, 0, 13]), torch.float32,
                     "FP8 K=37 N=23 (emulated path)")


CASES = [
    # --- m_splits -----------------------------------------------------------------------
    Case("m_splits_on_meta", "GroupedLinear", "none", "m_splits tensor on the meta device",
         lambda c: _fb(c.grouped, c.x(), torch.tensor(GOOD, device="meta")), ValueError,
         r"m_splits: is on meta but inp is on (cpu|cuda)"),
    Case("m_splits_on_meta_fp8", "GroupedLinear", "block", "m_splits on meta under FP8",
         lambda c: _fb(c.grouped, c.x(), torch.tensor(GOOD, device="meta")), ValueError,
         r"m_splits: is on meta but inp is on"),
    Case("m_splits_on_gpu_input_cpu", "GroupedLinear", "none",
         "CPU module and input, m_splits on the GPU", lambda c: _fb(
             grouped_linear.GroupedLinear(G, K, N, device="cpu"), c.x(device="cpu"),
             torch.tensor(GOOD, device="cuda")), ValueError,
         r"m_splits: is on cuda:0 but inp is on cpu", needs="cuda"),
    Case("m_splits_float_tensor", "GroupedLinear", "delayed", "m_splits a float tensor",
         lambda c: _fb(c.grouped, c.x(), torch.tensor([4.0, 0.0, 5.0])), TypeError,
         r"m_splits: dtype Float"),
    Case("m_splits_bool_tensor", "GroupedLinear", "current", "m_splits a bool tensor",
         lambda c: _fb(c.grouped, c.x(), torch.tensor([True, False, True])), TypeError,
         r"m_splits: dtype Bool"),
    Case("m_splits_float_entries", "GroupedLinear", "block", "m_splits list of floats",
         lambda c: _fb(c.grouped, c.x(), [4.0, 0.0, 5.0]), TypeError,
         r"m_splits: entry 0 is 4\.0 \(float\)"),
    Case("m_splits_bad_sum", "GroupedLinear", "block", "m_splits sums to 10 for 9 rows",
         lambda c: _fb(c.grouped, c.x(), [4, 1, 5]), ValueError,
         r"m_splits: sums to 10.*\(9\)"),
    Case("m_splits_negative", "GroupedLinear", "current", "a negative group size",
         lambda c: _fb(c.grouped, c.x(), [10, -1, 0]), ValueError, r"m_splits: entry 1 is -1"),
    Case("m_splits_count", "GroupedLinear", "delayed", "2 sizes for 3 groups",
         lambda c: _fb(c.grouped, c.x(), [4, 5]), ValueError,
         r"m_splits: has 2 entries; expected num_gemms = 3"),
    Case("m_splits_2d", "GroupedLinear", "none", "m_splits a 2-D tensor",
         lambda c: _fb(c.grouped, c.x(), torch.tensor([GOOD])), ValueError,
         r"m_splits: expected a 1-D tensor"),
    Case("m_splits_missing", "GroupedLinear", "none", "forward without m_splits",
         lambda c: _fb(c.grouped, c.x()), TypeError, r"m_splits", prefix=False),
    # --- input ----------------------------------------------------------------------------
    Case("inp_float64_fp8", "GroupedLinear", "current", "float64 input under FP8",
         lambda c: _fb(c.grouped, c.x(dtype=torch.float64), GOOD), TypeError,
         r"inp: dtype Double is not supported under FP8 autocast"),
    Case("inp_int32", "GroupedLinear", "none", "int32 input",
         lambda c: _fb(c.grouped, torch.ones(T, K, dtype=torch.int32, device=c.device), GOOD),
         TypeError, r"inp: dtype Int"),
    # (The weights may be float32 under a bf16 input: they are quantized from
    # their own values. The bias is added to the bf16 output.)
    Case("inp_bf16_bias_fp32_fp8", "GroupedLinear", "block", "bf16 input, fp32 bias",
         lambda c: _fb(c.grouped, c.x(dtype=torch.bfloat16), GOOD), TypeError,
         r"mixed dtypes: bias is Float but inp is BFloat16"),
    Case("inp_wrong_features_fp8", "GroupedLinear", "delayed", "input last dim 15, in_features 16",
         lambda c: _fb(c.grouped, c.x(k=K - 1), GOOD), ValueError, r"in_features = 16"),
    Case("inp_on_meta", "GroupedLinear", "none", "input on the meta device",
         lambda c: _fb(c.grouped, torch.empty(T, K, device="meta", requires_grad=True), GOOD),
         ValueError, r"inp is on meta but weight is on"),
    Case("inp_cpu_module_cuda", "GroupedLinear", "none", "CPU input, module on the GPU",
         lambda c: _fb(grouped_linear.GroupedLinear(G, K, N, device="cuda"), c.x(device="cpu"),
                       GOOD), ValueError, r"inp is on cpu but weight is on cuda", needs="cuda"),
    Case("linear_inp_0d", "Linear", "none", "0-D input",
         lambda c: _fb(c.linear, torch.tensor(1.0, device=c.device, requires_grad=True)),
         ValueError, r"inp: expected at least 1 dimension", target="linear"),
    Case("linear_wrong_features_fp8", "Linear", "current", "input last dim 17, in_features 16",
         lambda c: _fb(c.linear, c.x(k=K + 1)), ValueError, r"in_features = 16", target="linear"),
    Case("linear_given_m_splits", "Linear", "none", "Linear called with m_splits",
         lambda c: _fb(c.linear, c.x(), [4, 5]), TypeError,
         r"is_first_microbatch: got \[4, 5\] \(list\); expected None, True or False",
         target="linear"),
    Case("is_first_microbatch_str", "GroupedLinear", "current", "is_first_microbatch='yes'",
         lambda c: _fb(c.grouped, c.x(), GOOD, "yes"), TypeError,
         r"is_first_microbatch: got 'yes' \(str\)"),
    # --- main_grad --------------------------------------------------------------------------
    Case("main_grad_missing", "GroupedLinear", "none", "fuse_wgrad_accumulation without main_grad",
         lambda c: (delattr(c.fused.weight, "main_grad"), _fb(c.fused, c.x(), GOOD)), ValueError,
         r"fuse_wgrad_accumulation=True needs weight\.main_grad", target="fused"),
    Case("main_grad_bf16", "GroupedLinear", "none", "main_grad in bfloat16",
         lambda c: (setattr(c.fused.weight, "main_grad",
                            torch.zeros(G, N, K, dtype=torch.bfloat16, device=c.device)),
                    _fb(c.fused, c.x(), GOOD)), TypeError, r"main_grad: dtype BFloat16",
         target="fused"),
    Case("main_grad_shape_fp8", "GroupedLinear", "block", "main_grad shaped [3, 8, 15]",
         lambda c: (setattr(c.fused.weight, "main_grad", torch.zeros(G, N, K - 1, device=c.device)),
                    _fb(c.fused, c.x(), GOOD)), ValueError, r"main_grad: shape \[3, 8, 15\]",
         target="fused"),
    Case("main_grad_on_meta", "GroupedLinear", "none", "main_grad on the meta device",
         lambda c: (setattr(c.fused.weight, "main_grad", torch.zeros(G, N, K, device="meta")),
                    _fb(c.fused, c.x(), GOOD)), ValueError, r"main_grad is on meta but weight",
         target="fused"),
    # --- autocast and recipes ---------------------------------------------------------------
    Case("autocast_recipe_class", "autocast", "none", "recipe=DelayedScaling (the class)",
         lambda c: grouped_linear.autocast(recipe=fp8.DelayedScaling), TypeError,
         r"recipe: got the class DelayedScaling \(not an instance\)"),
    Case("autocast_recipe_str", "autocast", "none", "recipe='block'",
         lambda c: grouped_linear.autocast(recipe="block"), TypeError, r"recipe: got str"),
    Case("autocast_enabled_int", "autocast", "none", "enabled=1",
         lambda c: grouped_linear.autocast(enabled=1), TypeError, r"enabled: got 1"),
    Case("autocast_exit_twice", "autocast", "none", "__exit__ called twice on one region",
         _exit_twice, RuntimeError, r"autocast: __exit__ without a matching __enter__"),
    Case("recipe_margin_negative", "DelayedScaling", "none", "margin=-1",
         lambda c: grouped_linear.autocast(recipe=fp8.DelayedScaling(margin=-1)), ValueError,
         r"margin: got -1"),
    Case("recipe_margin_float", "DelayedScaling", "none", "margin=0.5",
         lambda c: grouped_linear.autocast(recipe=fp8.DelayedScaling(margin=0.5)), TypeError,
         r"margin: got 0\.5 \(float\)"),
    Case("recipe_history_len_zero", "DelayedScaling", "none", "amax_history_len=0",
         lambda c: grouped_linear.autocast(recipe=fp8.DelayedScaling(amax_history_len=0)),
         ValueError, r"amax_history_len: got 0"),
    Case("recipe_algo_unknown", "DelayedScaling", "none", "amax_compute_algo='mean'",
         lambda c: grouped_linear.autocast(recipe=fp8.DelayedScaling(amax_compute_algo="mean")),
         ValueError, r"amax_compute_algo: got 'mean'"),
    Case("recipe_algo_none", "DelayedScaling", "none", "amax_compute_algo=None",
         lambda c: grouped_linear.autocast(recipe=fp8.DelayedScaling(amax_compute_algo=None)),
         TypeError, r"amax_compute_algo: got None"),
    Case("recipe_format_unknown", "Float8CurrentScaling", "none", "fp8_format='E3M4'",
         lambda c: fp8.Float8CurrentScaling(fp8_format="E3M4").to_native(), TypeError,
         r"fp8_format: got 'E3M4'"),
    # --- checkpoints ------------------------------------------------------------------------
    Case("ckpt_out_features", "GroupedLinear", "none", "checkpoint with out_features 9 (not 8)",
         _ckpt((G, K, N + 1)), RuntimeError,
         r"size mismatch for weight0: copying a param with shape \(9, 16\)", prefix=False),
    Case("ckpt_more_experts", "GroupedLinear", "none", "checkpoint of 4 experts into 3",
         _ckpt((G + 1, K, N)), RuntimeError, r"Unexpected key\(s\) in state_dict: \"weight3\"",
         prefix=False),
    Case("ckpt_fewer_experts", "GroupedLinear", "none", "checkpoint of 2 experts into 3",
         _ckpt((G - 1, K, N)), RuntimeError, r"Missing key\(s\) in state_dict: \"weight2\"",
         prefix=False),
    Case("ckpt_fp8_state_groups", "GroupedLinear", "delayed",
         "FP8 _extra_state saved for 2 groups", _fp8_state_from_two_groups, RuntimeError,
         r"_extra_state: saved for 2 groups; this module has num_gemms = 3", prefix=False),
    Case("ckpt_linear_in_features", "Linear", "none", "Linear checkpoint with in_features 15",
         _ckpt((K - 1, N), grouped_linear.Linear), RuntimeError,
         r"size mismatch for weight: copying a param with shape torch\.Size\(\[8, 15\]\)",
         target="linear", prefix=False),
    # --- devices and sizes (accepted: documented behaviour) --------------------------------
    Case("fp8_K37_N23", "GroupedLinear", "current",
         "FP8 with K=37, N=23 (not multiples of 16)", _fp8_misaligned, None,
         notes="accepted: the grouped FP8 kernels need K, N % 16 == 0; other sizes run the "
               "emulated FP8 path (dequantize, float32 GEMM), checked against the reference"),
    Case("device_cuda_no_index", "GroupedLinear", "none", "device='cuda' (no index)",
         _cuda_no_index, None, needs="cuda",
         notes="accepted: parameters on the current GPU; calls run on the current stream of "
               "the parameters' device"),
    Case("device_cuda_without_cuda", "GroupedLinear", "none",
         "device='cuda' where torch has no CUDA",
         lambda c: grouped_linear.GroupedLinear(G, K, N, device="cuda"),
         (AssertionError, RuntimeError), r"CUDA|NVIDIA", needs="no_cuda", prefix=False,
         notes="torch's own error (raised while allocating the parameters)"),
    Case("other_gpu_current", "GroupedLinear", "none", "module on cuda:0 called with cuda:1 current",
         _other_gpu_current, None, needs="2gpu",
         notes="accepted: the inputs' device is used (device guard), not the current one"),
    Case("m_splits_other_gpu", "GroupedLinear", "none", "m_splits on cuda:1, module on cuda:0",
         lambda c: _fb(grouped_linear.GroupedLinear(G, K, N, device="cuda:0"),
                       c.x(device="cuda:0"), torch.tensor(GOOD, device="cuda:1")), ValueError,
         r"m_splits: is on cuda:1", needs="2gpu"),
]
CASE_IDS = [c.id for c in CASES]
assert len(set(CASE_IDS)) == len(CASE_IDS)


def _skip_reason(case: Case, device: str) -> Optional[str]:
    cuda_ok = torch.cuda.is_available() and grouped_linear.with_cuda
    if case.needs in ("cuda", "2gpu") and device != "cuda":
        return "runs with the CUDA parametrisation" if cuda_ok else "needs a GPU"
    if case.needs == "2gpu" and torch.cuda.device_count() < 2:
        return f"needs two GPUs (found {torch.cuda.device_count()})"
    if case.needs == "no_cuda" and (torch.cuda.is_available() or device != "cpu"):
        return "only where torch has no usable CUDA"
    if case.needs == "" and case.module in ("autocast", "DelayedScaling", "Float8CurrentScaling") \
            and device != "cpu":
        return "device-independent: runs once, with the CPU parametrisation"
    return None


def _fp8_follow_up(module, recipe, gen, device):
    """A correct FP8 forward + backward: against float64 products of the
    dequantized operands (fp8_testutil), conftest tolerance."""
    splits = [4, 0, 5] if isinstance(module, grouped_linear.GroupedLinear) else None
    x = randn(gen, T, K, device=device)
    dy = randn(gen, T, N, device=device)
    state = module._fp8_state
    if isinstance(recipe, fp8.DelayedScaling):  # scales from a history (a first step)
        with grouped_linear.autocast(recipe=recipe):
            first = module(x, splits) if splits else module(x)
        first.backward(dy)
    module.zero_grad(set_to_none=True)
    leaf = x.clone().requires_grad_(True)
    scale_fwd = state.scale_fwd.clone() if state.scale_fwd is not None else None
    with grouped_linear.autocast(recipe=recipe):
        out = module(leaf, splits) if splits else module(leaf)
    scale_bwd = state.scale_bwd.clone() if state.scale_bwd is not None else None
    out.backward(dy)
    use = splits or [T]
    w = module.weight if module.weight.dim() == 3 else module.weight.unsqueeze(0)
    q = dequantized_operands(recipe, x, w, dy, use, scale_fwd, scale_bwd)
    bias = module.bias if module.bias.dim() == 2 else module.bias.unsqueeze(0)
    assert_close_rel(out, ref_forward(q["x_row"], q["w"], bias, use), torch.float32,
                     "FP8 follow-up forward")
    assert_close_rel(leaf.grad, ref_dgrad(q["dy_row"], q["w"], use), torch.float32,
                     "FP8 follow-up dgrad")
    grad = module.weight.grad if module.weight.grad is not None else None
    if grad is not None:
        dw_ref = ref_wgrad(q["dy_col"], q["x_col"], use)[0]
        assert_close_rel(grad.reshape(dw_ref.shape), dw_ref, torch.float32, "FP8 follow-up wgrad",
                         tol=max(TOLERANCE[torch.float32], 1e-4))
    module.zero_grad(set_to_none=True)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_bad_input_matrix(device, case, gen):
    reason = _skip_reason(case, device)
    engine = grouped_linear.engine_for(device) if device in ("cpu", "cuda") else ""
    key = f"{case.id}@{device}-{engine}"
    row = dict(id=case.id, module=case.module, recipe=case.recipe, what=case.what,
               expected=("accepted" if case.exc is None else
                         "/".join(e.__name__ for e in (case.exc if isinstance(case.exc, tuple)
                                                       else (case.exc,)))),
               notes=case.notes, pattern=case.pattern, order=CASE_IDS.index(case.id),
               device=device, engine=engine)
    if reason:
        record("bad_input", key, dict(row, status="skipped", reason=reason))
        pytest.skip(reason)
    c = Ctx(device, gen)
    target = getattr(c, case.target)
    before = snapshot(*[p for p in target.parameters()])
    recipe = RECIPES[case.recipe]()
    message = ""
    if case.exc is None:
        case.call(c)
    else:
        with pytest.raises(case.exc) as info:
            if recipe is None:
                case.call(c)
            else:
                with grouped_linear.autocast(recipe=recipe):
                    case.call(c)
        message = str(info.value)
        assert re.search(case.pattern, message), \
            f"message {message!r} does not match {case.pattern!r}"
        if case.prefix:
            assert message.startswith("grouped_linear: "), message
        # Nothing written into the module, no autocast region left open.
        assert_unchanged(before, list(target.parameters()), f"{case.target} parameters")
        assert all(p.grad is None for p in target.parameters())
        assert not fp8.is_enabled(), "a failed call left an autocast region open"
    # The module still works: a correct call afterwards.
    if case.target == "fused":
        target.weight.main_grad = torch.zeros(G, N, K, device=device)
    check_module_healthy(target, gen, num_gemms=G if case.target != "linear" else None)
    if recipe is not None:
        _fp8_follow_up(target, recipe, gen, device)
    record("bad_input", key, dict(row, status="passed", message=message[:200]))


def test_matrix_has_enough_cases():
    assert len(CASES) >= 25
    assert {c.recipe for c in CASES} == set(RECIPES)
    assert {"GroupedLinear", "Linear", "autocast"} <= {c.module for c in CASES}
