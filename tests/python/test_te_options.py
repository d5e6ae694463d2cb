"""Transformer Engine options of GroupedLinear / Linear: delay_wgrad_compute
with backward_dw(), is_first_microbatch with fused main_grad accumulation,
the tensor-parallel shape arguments, and the rejected userbuffers options.
Values are checked against float64 references (gl_testutil) and, for the
delayed path, against the undelayed module bit for bit."""

import copy

import pytest
import torch

import grouped_linear
from grouped_linear import fp8
from conftest import TOLERANCE
from fp8_testutil import assert_finite_rel_le, dequantized_operands, formats, fp8_bound
from gl_testutil import (DTYPE_IDS, DTYPES, assert_close_rel, assert_empty_groups_zero,
                         make_splits, randn, ref_dgrad, ref_forward, ref_wgrad, rel_err,
                         set_params)

G, K, N, T = 4, 37, 23, 61


def _pair(device, dtype, gen, **kwargs):
    """A delayed module and an undelayed twin with the same parameters."""
    delayed = grouped_linear.GroupedLinear(G, K, N, params_dtype=dtype, device=device,
                                           delay_wgrad_compute=True, **kwargs)
    set_params(delayed, gen)
    plain = grouped_linear.GroupedLinear(G, K, N, params_dtype=dtype, device=device, **kwargs)
    plain.load_state_dict(delayed.state_dict())
    return delayed, plain


def _step(module, x, splits, dy, **kwargs):
    x = x.detach().clone().requires_grad_(True)
    out = module(x, splits, **kwargs)
    out.backward(dy)
    return out, x.grad


def _one_stashed_step(device, gen):
    """A delayed float32 module after one forward + backward (one entry stashed)."""
    delayed, _ = _pair(device, torch.float32, gen)
    splits = [10, 20, 0, 31]
    x = randn(gen, T, K, device=device)
    dy = randn(gen, T, N, device=device)
    _step(delayed, x, splits, dy)
    return delayed, splits, x, dy


# --- delay_wgrad_compute -------------------------------------------------------------

@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_backward_computes_dgrad_and_backward_dw_the_rest(device, dtype, with_bias, gen):
    delayed, plain = _pair(device, dtype, gen, bias=with_bias)
    splits = make_splits(gen, T, G, "random_with_zeros")
    x = randn(gen, T, K, dtype=dtype, device=device)
    dy = randn(gen, T, N, dtype=dtype, device=device)
    assert delayed.need_backward_dw() and not plain.need_backward_dw()

    out, dx = _step(delayed, x, splits, dy)
    assert_close_rel(out, ref_forward(x, delayed.weight, delayed.bias, splits), dtype, "out")
    assert_close_rel(dx, ref_dgrad(dy, delayed.weight, splits), dtype, "dgrad")
    # Nothing but dgrad ran: the parameters' gradients wait in the stash.
    assert delayed.weight.grad is None
    assert delayed.bias is None or delayed.bias.grad is None
    assert delayed._config.pending_wgrads == 1

    delayed.backward_dw()
    assert delayed._config.pending_wgrads == 0
    dw_ref, db_ref = ref_wgrad(dy, x, splits)
    assert_close_rel(delayed.weight.grad, dw_ref, dtype, "delayed wgrad")
    assert_empty_groups_zero(delayed.weight.grad, splits, "delayed wgrad")
    if with_bias:
        assert_close_rel(delayed.bias.grad, db_ref, dtype, "delayed bias grad")

    # The same products as the undelayed module, bit for bit.
    plain_out, plain_dx = _step(plain, x, splits, dy)
    assert torch.equal(out, plain_out) and torch.equal(dx, plain_dx)
    assert torch.equal(delayed.weight.grad, plain.weight.grad)
    if with_bias:
        assert torch.equal(delayed.bias.grad, plain.bias.grad)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_backward_dw_adds_to_existing_grads(device, dtype, gen):
    """Two micro-batches, each followed by backward_dw: .grad holds the sum,
    as autograd's accumulation would (TE overwrites; see MIGRATING_FROM_TE)."""
    delayed, _ = _pair(device, dtype, gen)
    dw_ref = db_ref = 0
    for _ in range(2):
        splits = make_splits(gen, T, G, "uniform_random")
        x = randn(gen, T, K, dtype=dtype, device=device)
        dy = randn(gen, T, N, dtype=dtype, device=device)
        _step(delayed, x, splits, dy)
        delayed.backward_dw()
        dw, db = ref_wgrad(dy, x, splits)
        dw_ref, db_ref = dw_ref + dw, db_ref + db
    assert_close_rel(delayed.weight.grad, dw_ref, dtype, "summed wgrad", tol=2 * TOLERANCE[dtype])
    assert_close_rel(delayed.bias.grad, db_ref, dtype, "summed bias grad",
                     tol=2 * TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_stash_is_first_in_first_out_with_main_grad(device, dtype, gen):
    """fuse_wgrad_accumulation + is_first_microbatch: the first micro-batch's
    entry overwrites main_grad and the second adds to it, which gives the sum
    only when backward_dw runs them oldest first."""
    delayed, _ = _pair(device, dtype, gen, fuse_wgrad_accumulation=True)
    garbage = randn(gen, G, N, K, device=device, scale=100.0)
    main_grad = garbage.clone()
    delayed.weight.main_grad = main_grad
    steps = []
    for first in (True, False):
        splits = make_splits(gen, T, G, "random_with_zeros")
        x = randn(gen, T, K, dtype=dtype, device=device)
        dy = randn(gen, T, N, dtype=dtype, device=device)
        _, dx = _step(delayed, x, splits, dy, is_first_microbatch=first)
        assert_close_rel(dx, ref_dgrad(dy, delayed.weight, splits), dtype, "dgrad")
        steps.append((splits, x, dy))
    assert torch.equal(main_grad, garbage), "backward wrote main_grad before backward_dw"
    assert delayed._config.pending_wgrads == 2
    delayed.backward_dw()
    delayed.backward_dw()
    expected = sum(ref_wgrad(dy, x, splits)[0] for splits, x, dy in steps)
    assert_close_rel(main_grad, expected, torch.float32, "main_grad",
                     tol=max(TOLERANCE[dtype], 1e-4))
    assert delayed.weight.grad is None, "fused accumulation leaves weight.grad unset"
    db = sum(ref_wgrad(dy, x, splits)[1] for splits, x, dy in steps)
    assert_close_rel(delayed.bias.grad, db, dtype, "bias grad", tol=2 * TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_first_microbatch_overwrites_main_grad(device, dtype, gen):
    """Without delay too: is_first_microbatch=True writes main_grad (TE's
    rule), False and None add to it."""
    module = grouped_linear.GroupedLinear(G, K, N, params_dtype=dtype, device=device,
                                          fuse_wgrad_accumulation=True)
    set_params(module, gen)
    module.weight.main_grad = randn(gen, G, N, K, device=device, scale=100.0)
    expected = 0
    for first in (True, False, None):
        splits = make_splits(gen, T, G, "random_with_zeros")
        x = randn(gen, T, K, dtype=dtype, device=device)
        dy = randn(gen, T, N, dtype=dtype, device=device)
        _step(module, x, splits, dy, is_first_microbatch=first)
        expected = expected + ref_wgrad(dy, x, splits)[0]
        assert_close_rel(module.weight.main_grad, expected, torch.float32,
                         f"main_grad after is_first_microbatch={first}",
                         tol=max(TOLERANCE[dtype], 1e-4))


def test_backward_dw_with_nothing_stashed_does_nothing(device, gen):
    delayed, plain = _pair(device, torch.float32, gen)
    for module in (delayed, plain):
        calls = []
        module.register_wgrad_accumulation_and_reduce_hooks(lambda: calls.append(1))
        module.backward_dw()
        assert module.weight.grad is None and module.bias.grad is None and calls == []
    # Undelayed: backward computes everything, backward_dw adds nothing.
    splits = [15, 0, 30, 16]
    x = randn(gen, T, K, device=device)
    dy = randn(gen, T, N, device=device)
    _step(plain, x, splits, dy)
    grad = plain.weight.grad.clone()
    plain.backward_dw()
    assert torch.equal(plain.weight.grad, grad)
    assert_close_rel(grad, ref_wgrad(dy, x, splits)[0], torch.float32, "undelayed wgrad")


def test_hooks_run_after_each_backward_dw(device, gen):
    delayed, _ = _pair(device, torch.float32, gen)
    seen = []
    delayed.register_wgrad_accumulation_and_reduce_hooks(
        lambda: seen.append(delayed.weight.grad.clone()))
    splits = [20, 11, 0, 30]
    x = randn(gen, T, K, device=device)
    dy = randn(gen, T, N, device=device)
    _step(delayed, x, splits, dy)
    delayed.backward_dw()
    delayed.backward_dw()  # nothing stashed: no second call
    assert len(seen) == 1
    assert_close_rel(seen[0], ref_wgrad(dy, x, splits)[0], torch.float32, "grad seen by hook")
    with pytest.raises(TypeError, match="hook"):
        delayed.register_wgrad_accumulation_and_reduce_hooks("not callable")


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
def test_linear_delay_wgrad_compute(device, with_bias, gen):
    module = grouped_linear.Linear(K, N, bias=with_bias, device=device, delay_wgrad_compute=True)
    set_params(module, gen)
    x = randn(gen, 3, 7, K, device=device).requires_grad_(True)
    dy = randn(gen, 3, 7, N, device=device)
    module(x).backward(dy)
    assert module.weight.grad is None
    assert_close_rel(x.grad, ref_dgrad(dy, module.weight, [21]).reshape(3, 7, K),
                     torch.float32, "Linear dgrad")
    module.backward_dw()
    dw_ref, db_ref = ref_wgrad(dy, x, [21])
    assert module.weight.grad.shape == (N, K)
    assert_close_rel(module.weight.grad, dw_ref[0], torch.float32, "Linear delayed wgrad")
    if with_bias:
        assert module.bias.grad.shape == (N,)
        assert_close_rel(module.bias.grad, db_ref[0], torch.float32, "Linear delayed bias grad")


def test_frozen_weight_defers_only_the_bias(device, gen):
    delayed, _ = _pair(device, torch.float32, gen)
    delayed.weight.requires_grad_(False)
    splits = [10, 20, 0, 31]
    x = randn(gen, T, K, device=device)
    dy = randn(gen, T, N, device=device)
    _, dx = _step(delayed, x, splits, dy)
    assert_close_rel(dx, ref_dgrad(dy, delayed.weight, splits), torch.float32, "dgrad")
    assert delayed.bias.grad is None and delayed._config.pending_wgrads == 1
    delayed.backward_dw()
    assert delayed.weight.grad is None
    assert_close_rel(delayed.bias.grad, ref_wgrad(dy, x, splits)[1], torch.float32, "bias grad")


def test_no_grad_forward_and_inference_stash_nothing(device, gen):
    delayed, _ = _pair(device, torch.float32, gen)
    x = randn(gen, T, K, device=device)
    splits = [10, 20, 0, 31]
    with torch.no_grad():
        out = delayed(x, splits)
    assert_close_rel(out, ref_forward(x, delayed.weight, delayed.bias, splits), torch.float32,
                     "no_grad forward")
    assert delayed._config.pending_wgrads == 0


def test_deepcopy_starts_with_an_empty_stash(device, gen):
    delayed, splits, x, dy = _one_stashed_step(device, gen)
    clone = copy.deepcopy(delayed)
    assert clone.delay_wgrad_compute and clone._config.delay_wgrad_compute
    assert clone._config.pending_wgrads == 0 and delayed._config.pending_wgrads == 1
    # Each has its own stash: the copy's backward does not feed the original's.
    _step(clone, x, splits, dy)
    assert clone._config.pending_wgrads == 1 and delayed._config.pending_wgrads == 1
    clone.backward_dw()
    delayed.backward_dw()
    dw_ref = ref_wgrad(dy, x, splits)[0]
    assert_close_rel(clone.weight.grad, dw_ref, torch.float32, "copy's wgrad")
    assert_close_rel(delayed.weight.grad, dw_ref, torch.float32, "original's wgrad")


def test_backward_dw_checks_the_weight_and_keeps_the_entry(device, gen):
    delayed, splits, x, dy = _one_stashed_step(device, gen)
    wrong = torch.zeros(G, K, N, device=device, requires_grad=True)
    with pytest.raises(ValueError, match="weight: shape"):
        grouped_linear._C.backward_dw(delayed._config, wrong, None)
    assert wrong.grad is None and delayed._config.pending_wgrads == 1
    delayed.backward_dw()
    assert_close_rel(delayed.weight.grad, ref_wgrad(dy, x, splits)[0], torch.float32, "wgrad")


def test_failed_forward_leaves_the_stash_working(device, gen):
    delayed, _ = _pair(device, torch.float32, gen)
    x = randn(gen, T, K, device=device).requires_grad_(True)
    with pytest.raises(ValueError, match="m_splits"):
        delayed(x, [T, 0, 0])  # three sizes for four groups
    with pytest.raises(ValueError, match="in_features"):
        delayed(randn(gen, T, K + 1, device=device), [T, 0, 0, 0])
    assert delayed._config.pending_wgrads == 0
    splits = [10, 20, 0, 31]
    dy = randn(gen, T, N, device=device)
    _step(delayed, x, splits, dy)
    delayed.backward_dw()
    assert_close_rel(delayed.weight.grad, ref_wgrad(dy, x, splits)[0], torch.float32, "wgrad")


FP8_RECIPES = {
    "delayed": lambda: fp8.DelayedScaling(amax_history_len=4),
    "current": lambda: fp8.Float8CurrentScaling(),
    "block": lambda: fp8.Float8BlockScaling(),
}


@pytest.mark.parametrize("keep_input", [False, True], ids=["fp8-input", "original-input"])
@pytest.mark.parametrize("fuse", [False, True], ids=["grad", "main_grad"])
@pytest.mark.parametrize("recipe_id", list(FP8_RECIPES))
def test_fp8_delayed_equals_undelayed(device, recipe_id, fuse, keep_input, gen):
    """Under FP8 autocast the stash holds the quantized operands; backward_dw
    gives the undelayed module's gradients bit for bit, which are the
    products of the dequantized operands (float64 reference)."""
    recipe = FP8_RECIPES[recipe_id]()
    kwargs = dict(fuse_wgrad_accumulation=fuse, save_original_input=keep_input)
    delayed, plain = _pair(device, torch.bfloat16, gen, **kwargs)
    splits = make_splits(gen, 150, G, "random_with_zeros")
    x = randn(gen, 150, K, dtype=torch.bfloat16, device=device)
    dy = randn(gen, 150, N, dtype=torch.bfloat16, device=device)
    if fuse:
        delayed.weight.main_grad = torch.zeros(G, N, K, device=device)
        plain.weight.main_grad = torch.zeros(G, N, K, device=device)
    grads = []
    for module in (delayed, plain):
        # Two steps: the first gives delayed scaling scales from a history.
        for step in range(2):
            module.zero_grad(set_to_none=True)
            if fuse:
                module.weight.main_grad.zero_()
            xl = x.clone().requires_grad_(True)
            state = module._fp8_state
            scale_fwd = state.scale_fwd.clone() if state.scale_fwd is not None else None
            with grouped_linear.autocast(recipe=recipe):
                out = module(xl, splits)
            scale_bwd = state.scale_bwd.clone() if state.scale_bwd is not None else None
            out.backward(dy)
            if module is delayed:
                assert module.weight.grad is None and module.bias.grad is None
                assert module._config.pending_wgrads == 1
                module.backward_dw()
        dw = module.weight.main_grad if fuse else module.weight.grad
        grads.append((out, xl.grad, dw, module.bias.grad))
    for what, a, b in zip(("out", "dgrad", "wgrad", "bias grad"), *grads):
        assert torch.equal(a, b), f"{what}: delayed differs from undelayed"
    _, _, dw, db = grads[0]
    dw_dtype = torch.float32 if fuse else torch.bfloat16
    dw_ref, db_ref = ref_wgrad(dy, x, splits)
    fwd, bwd = formats(recipe)
    assert_finite_rel_le(rel_err(dw, dw_ref), fp8_bound(bwd, fwd, dw_dtype),
                         "delayed FP8 wgrad vs unquantized")
    if not (keep_input and recipe_id == "delayed"):
        # (With save_original_input, delayed scaling casts X in backward with
        # the scale of the step boundary passed since: not scale_fwd.)
        q = dequantized_operands(recipe, x, delayed.weight, dy, splits, scale_fwd, scale_bwd)
        assert_close_rel(dw, ref_wgrad(q["dy_col"], q["x_col"], splits)[0], dw_dtype,
                         "delayed FP8 wgrad vs dequantized operands",
                         tol=max(TOLERANCE[dw_dtype], 1e-4) if fuse else None)
    assert_close_rel(db, db_ref, torch.bfloat16, "delayed FP8 bias grad")


def test_delay_wgrad_compute_is_refused_under_torch_compile(device, gen):
    delayed, _ = _pair(device, torch.float32, gen)
    compiled = torch.compile(delayed, fullgraph=True, backend="eager")
    x = randn(gen, T, K, device=device)
    with pytest.raises(Exception, match="delay_wgrad_compute=True is not supported under "
                                        "torch.compile"):
        compiled(x, torch.tensor([10, 20, 0, 31]))
    torch._dynamo.reset()
    # Without fullgraph dynamo runs the module eagerly, where delay works.
    splits = [10, 20, 0, 31]
    fallback = torch.compile(delayed, backend="eager")
    xl = x.clone().requires_grad_(True)
    dy = randn(gen, T, N, device=device)
    out = fallback(xl, torch.tensor(splits))
    assert_close_rel(out, ref_forward(x, delayed.weight, delayed.bias, splits), torch.float32,
                     "forward after the refusal")
    out.backward(dy)
    assert delayed.weight.grad is None and delayed._config.pending_wgrads == 1
    delayed.backward_dw()
    assert_close_rel(delayed.weight.grad, ref_wgrad(dy, x, splits)[0], torch.float32, "wgrad")
    torch._dynamo.reset()


# --- tensor-parallel shapes ----------------------------------------------------------

class _FakeGroup:
    """Stands for a torch.distributed ProcessGroup: only size() is read."""

    def __init__(self, size):
        self._size = size

    def size(self):
        return self._size


@pytest.mark.parametrize("mode", ["column", "row"])
def test_parallel_mode_shards_the_weights(device, mode, gen):
    tp = 4
    k_global, n_global = 4 * K, 4 * N
    module = grouped_linear.GroupedLinear(G, k_global, n_global, bias=False, device=device,
                                          parallel_mode=mode, tp_size=tp, sequence_parallel=True)
    k, n = (k_global, N) if mode == "column" else (K, n_global)
    assert module.weight.shape == (G, n, k)
    assert (module.in_features, module.out_features) == (k, n)
    assert module.tp_size == tp and module.parallel_mode == mode and module.sequence_parallel
    assert module.weight.tensor_model_parallel
    assert module.weight.partition_dim == (1 if mode == "column" else 2)
    # The shard is an ordinary grouped layer of the local sizes.
    set_params(module, gen)
    splits = [10, 0, 25, 5]
    x = randn(gen, 40, k, device=device)
    assert_close_rel(module(x, splits), ref_forward(x, module.weight, None, splits),
                     torch.float32, f"{mode}-parallel shard forward")


def test_tp_group_size_wins_over_tp_size(device):
    module = grouped_linear.GroupedLinear(G, 8, 6, bias=False, device=device,
                                          parallel_mode="column", tp_size=1,
                                          tp_group=_FakeGroup(3))
    assert module.tp_size == 3 and module.weight.shape == (G, 2, 8)
    single = grouped_linear.GroupedLinear(G, 8, 6, device=device, tp_group=_FakeGroup(1))
    assert single.tp_size == 1 and single.weight.shape == (G, 6, 8)
    # sequence_parallel means nothing without tensor parallelism (as in TE).
    assert not grouped_linear.GroupedLinear(G, 8, 6, device=device,
                                            sequence_parallel=True).sequence_parallel


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(parallel_mode="column", tp_size=4), ValueError, "out_features=23 is not divisible"),
    (dict(parallel_mode="row", tp_size=2), ValueError, "in_features=37 is not divisible"),
    (dict(parallel_mode="diagonal"), ValueError, "parallel_mode: got 'diagonal'"),
    (dict(tp_size=0), ValueError, "tp_size: is 0"),
    (dict(tp_size="2"), TypeError, "tp_size: expected an int"),
    (dict(tp_group=object()), TypeError, "tp_group: could not read its size"),
    (dict(tp_group=_FakeGroup(0)), ValueError, "tp_group size: is 0"),
    (dict(tp_size=2, bias=True), ValueError, "bias=True with tp_size=2"),
    (dict(ub_overlap_rs=True), ValueError, "ub_overlap_rs=True"),
    (dict(ub_overlap_ag=True), ValueError, "ub_overlap_ag=True"),
    (dict(ub_name="fc1"), ValueError, "ub_name='fc1'"),
    (dict(ub_bulk_wgrad=1), ValueError, "ub_bulk_wgrad=1"),
    (dict(fp8_group=None), TypeError, "unexpected keyword argument 'fp8_group'"),
])
def test_bad_te_options_fail_clearly(device, kwargs, error, match, gen):
    with pytest.raises(error, match=match):
        grouped_linear.GroupedLinear(G, K, N, device=device, **kwargs)
    # Nothing global changed: a module built next works.
    module = grouped_linear.GroupedLinear(G, K, N, device=device)
    set_params(module, gen)
    x = randn(gen, 20, K, device=device)
    assert_close_rel(module(x, [5, 5, 5, 5]), ref_forward(x, module.weight, module.bias,
                                                          [5, 5, 5, 5]), torch.float32, "next")


def test_ub_options_at_their_defaults_are_accepted(device, gen):
    module = grouped_linear.GroupedLinear(G, K, N, device=device, ub_overlap_rs=False,
                                          ub_overlap_ag=False, ub_name=None)
    linear = grouped_linear.Linear(K, N, device=device, ub_overlap_rs_dgrad=False,
                                   ub_bulk_dgrad=False, ub_bulk_wgrad=False, ub_name=None)
    for m in (module, linear):
        set_params(m, gen)
    x = randn(gen, 12, K, device=device)
    assert_close_rel(module(x, [3, 3, 3, 3]), ref_forward(x, module.weight, module.bias,
                                                          [3, 3, 3, 3]), torch.float32, "grouped")
    assert_close_rel(linear(x), ref_forward(x, linear.weight, linear.bias, [12]), torch.float32,
                     "linear")


@pytest.mark.parametrize("kwargs, match", [
    (dict(parallel_mode="row", tp_size=2), "Linear with parallel_mode='row' and tp_size=2"),
    (dict(parallel_mode="column", tp_group=_FakeGroup(2)), "parallel_mode='column'"),
    (dict(parameters_split={"q": 8, "k": 8}), "parameters_split"),
    (dict(ub_overlap_ag=True), "ub_overlap_ag=True"),
])
def test_linear_refuses_what_needs_communication(device, kwargs, match):
    with pytest.raises(ValueError, match=match):
        grouped_linear.Linear(16, 16, device=device, **kwargs)


def test_linear_accepts_tp_arguments_for_one_rank(device, gen):
    module = grouped_linear.Linear(K, N, device=device, parallel_mode="row", tp_size=1,
                                   sequence_parallel=True)
    assert module.weight.shape == (N, K) and module.weight.partition_dim == 1
    assert not module.sequence_parallel
    set_params(module, gen)
    x = randn(gen, 9, K, device=device)
    assert_close_rel(module(x), ref_forward(x, module.weight, module.bias, [9]), torch.float32,
                     "Linear forward")


class _Tracker:
    """A model-parallel RNG tracker: fork(name) is a context manager."""

    def __init__(self):
        self.forks = []

    def fork(self, name="model-parallel-rng"):
        self.forks.append(name)
        seed = 1234 + len(name)

        class _Fork:
            def __enter__(self_inner):
                self_inner.state = torch.get_rng_state()
                torch.manual_seed(seed)

            def __exit__(self_inner, *exc):
                torch.set_rng_state(self_inner.state)
                return False

        return _Fork()


def test_rng_tracker_forks_around_initialization():
    tracker = _Tracker()
    a = grouped_linear.GroupedLinear(G, K, N, device="cpu", get_rng_state_tracker=lambda: tracker,
                                     rng_tracker_name="expert-rng")
    b = grouped_linear.GroupedLinear(G, K, N, device="cpu", get_rng_state_tracker=lambda: tracker,
                                     rng_tracker_name="expert-rng")
    c = grouped_linear.Linear(K, N, device="cpu", get_rng_state_tracker=lambda: tracker)
    assert tracker.forks == ["expert-rng", "expert-rng", "model-parallel-rng"]
    # Same tracker seed: the same initial weights, drawn as TE's default init.
    assert torch.equal(a.weight, b.weight)
    generator = torch.Generator().manual_seed(1234 + len("expert-rng"))
    expected = torch.empty(G, N, K).normal_(0.0, 0.023, generator=generator)
    assert torch.equal(a.weight, expected)
    assert torch.count_nonzero(c.bias) == 0
