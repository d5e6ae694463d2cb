"""Reliability: memory stays flat over many steps, cuBLAS workspaces are made
once per (thread, device, stream), results are bitwise reproducible, and
concurrent use (threads, streams, devices) gives the serial results.

See RELIABILITY.md for what each test shows and what stays untested. With
GL_RELIABILITY_OUT set, figures are written there for
scripts/reliability_report.py (reliability_record.py)."""

import copy
import os
import threading
import time

import pytest
import torch

import grouped_linear
from grouped_linear import fp8, ops
from gl_testutil import make_splits, randn, set_params
from reliability_record import record

_CUDA = torch.cuda.is_available() and grouped_linear.with_cuda
GPU = "cuda"  # the device of the CUDA tests (one place, for a dry run of their logic)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
RECIPES = {
    "none": lambda: None,
    "delayed": lambda: fp8.DelayedScaling(amax_history_len=4),
    "current": lambda: fp8.Float8CurrentScaling(),
    "block": lambda: fp8.Float8BlockScaling(),
}


def _cuda_engines():
    return ops.engine_names(GPU) if _CUDA else []


def _require_cuda():
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    if not grouped_linear.with_cuda:
        pytest.skip("grouped_linear was built without CUDA")


# --- helpers ------------------------------------------------------------------------------

def _step(module, x, splits, dy, recipe, grads_only=True):
    """One forward + backward. grads_only: gradients through torch.autograd.grad
    (nothing accumulated into shared parameters, so threads can share them).
    Returns the output and the gradients (input, weight or main_grad, bias)."""
    leaf = x.detach().requires_grad_(True)
    if recipe is None:
        out = module(leaf, splits)
    else:
        with grouped_linear.autocast(recipe=recipe):
            out = module(leaf, splits)
    params = [module.weight] + ([module.bias] if module.bias is not None else [])
    if grads_only:
        grads = torch.autograd.grad(out, [leaf] + params, dy)
    else:
        module.zero_grad(set_to_none=True)
        out.backward(dy)
        grads = [leaf.grad] + [p.grad for p in params]
    return [out.detach()] + [None if g is None else g.detach() for g in grads]


def _problem(gen, device, dtype, groups, rows, k, n, kind="random_with_zeros"):
    splits = make_splits(gen, rows, groups, kind)
    x = randn(gen, rows, k, dtype=dtype, device=device)
    dy = randn(gen, rows, n, dtype=dtype, device=device)
    return splits, x, dy


def _bitwise_equal(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
        a.detach().cpu().contiguous().view(torch.uint8), b.detach().cpu().contiguous().view(torch.uint8))


def _assert_all_equal(expected, got, what):
    names = ["out", "grad_input", "grad_weight", "grad_bias"]
    for i, (e, g) in enumerate(zip(expected, got)):
        assert _bitwise_equal(e, g), f"{what}: {names[i] if i < 4 else i} differs bitwise"


# --- memory (CUDA) ------------------------------------------------------------------------

MEM_ITERS = int(os.environ.get("GL_MEMORY_ITERS", "10000"))


@pytest.mark.parametrize("mode", ["bf16", "fp8_delayed"])
def test_memory_flat_over_many_steps(mode, gen):
    """10,000 forward+backward steps: torch.cuda.memory_allocated is the same
    after every 500 steps as after warm-up (no tensor, workspace or FP8
    state kept per call), and the peak stays a step's working set."""
    _require_cuda()
    device, groups, rows, k, n = GPU, 8, 256, 64, 96
    module = grouped_linear.GroupedLinear(groups, k, n, params_dtype=torch.bfloat16, device=device)
    set_params(module, gen)
    splits_list, x, dy = _problem(gen, device, torch.bfloat16, groups, rows, k, n)
    splits = torch.tensor(splits_list, device=device)  # device sizes: no host sync per call
    x.requires_grad_(True)
    recipe = fp8.DelayedScaling(amax_history_len=16) if mode == "fp8_delayed" else None

    def step():
        if recipe is None:
            out = module(x, splits)
        else:
            with grouped_linear.autocast(recipe=recipe):  # a step boundary every step
                out = module(x, splits)
        out.backward(dy)  # accumulates into x.grad / weight.grad in place

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    reserved0 = torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    samples = []
    start = time.perf_counter()
    for i in range(MEM_ITERS):
        step()
        if (i + 1) % 500 == 0:
            torch.cuda.synchronize()
            samples.append(torch.cuda.memory_allocated())
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated()
    result = dict(iterations=MEM_ITERS, allocated_after_warmup=base,
                  allocated_min=min(samples), allocated_max=max(samples),
                  max_growth_bytes=max(samples) - base, peak_above_base_bytes=peak - base,
                  reserved_growth_bytes=torch.cuda.memory_reserved() - reserved0,
                  seconds=round(seconds, 2), us_per_step=round(seconds / MEM_ITERS * 1e6, 1),
                  shape=f"G={groups} T={rows} K={k} N={n} bf16", engine=grouped_linear.engine_for(device))
    record("memory", mode, result)
    print(result)
    assert torch.isfinite(x.grad).all() and torch.isfinite(module.weight.grad).all()
    # A leak of even one 512-byte block per step would add 5 MB.
    assert max(samples) - min(samples) <= 256 * 1024 and samples[-1] <= base + 256 * 1024, result
    assert peak - base <= 16 * 1024 * 1024, result


def test_cublas_workspace_once_per_stream(gen):
    """The cuBLAS engine's handle + workspace are made on a thread's first
    call on a (device, stream) and found again afterwards: memory_allocated
    grows by one workspace on each new stream and by nothing on a stream seen
    before. The grouped engine's per-launch argument block is given back
    within the call (no growth at all)."""
    _require_cuda()
    if "cublas" not in _cuda_engines():
        pytest.skip("the cublas engine is not built")
    device = GPU
    splits = [16, 0, 40, 8]
    x = randn(gen, 64, 32, dtype=torch.bfloat16, device=device)
    w = randn(gen, 4, 48, 32, dtype=torch.bfloat16, device=device, scale=32 ** -0.5)
    out = torch.empty(64, 48, dtype=torch.bfloat16, device=device)
    expected = {e: ops.forward(x, w, None, splits, engine=e) for e in _cuda_engines()}
    torch.cuda.synchronize()
    result = {}

    def body():  # a fresh thread: an empty per-thread table
        try:
            s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
            assert s1.cuda_stream != s2.cuda_stream

            def call(stream, engine="cublas"):
                with torch.cuda.stream(stream):
                    ops.forward(x, w, None, splits, out=out, engine=engine)
                stream.synchronize()
                assert torch.equal(out, expected[engine]), f"{engine} on another stream differs"
                return torch.cuda.memory_allocated()

            m0 = torch.cuda.memory_allocated()
            seq = [call(s1), call(s1), call(s2), call(s1), call(s2), call(s2)]
            result["deltas"] = [b - a for a, b in zip([m0] + seq[:-1], seq)]
            others = [e for e in _cuda_engines() if e != "cublas"]
            for engine in others:  # e.g. sm90_grouped: nothing kept after a call
                before = torch.cuda.memory_allocated()
                call(s1, engine)
                call(s2, engine)
                result[f"{engine}_delta"] = torch.cuda.memory_allocated() - before
        except BaseException as exc:  # noqa: BLE001 (re-raised in the test thread)
            result["error"] = exc

    before_thread = torch.cuda.memory_allocated()
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    deltas = result["deltas"]
    workspace = deltas[0]
    kept = torch.cuda.memory_allocated() - before_thread
    record("workspaces", "cublas", dict(
        deltas_per_call=deltas, workspace_bytes=workspace,
        kept_after_thread_exit_bytes=kept,
        **{k: v for k, v in result.items() if k.endswith("_delta")}))
    assert workspace >= 1 << 20, f"first call on a new stream made no workspace: {deltas}"
    assert deltas == [workspace, 0, workspace, 0, 0, 0], deltas
    for key, value in result.items():
        if key.endswith("_delta"):
            assert value == 0, f"{key}: {value} bytes kept after calls"
    # Documented (RELIABILITY.md): entries live for the process, also after
    # their thread exits (0 would mean they are given back at thread exit).
    assert kept in (0, 2 * workspace), kept


# --- determinism ----------------------------------------------------------------------------

@pytest.fixture
def deterministic(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(previous)


def _determinism_cases(device):
    if device == "cpu":
        shapes = [(5, 120, 40, 24), (3, 90, 37, 23)]
    else:  # aligned (grouped and FP8 kernels) and not (cuBLAS / emulated FP8); sizes where
        # cuBLAS may pick split-K algorithms (long reductions over few rows)
        shapes = [(6, 2048, 512, 256), (4, 64, 1024, 32), (3, 300, 37, 23)]
    cases = []
    for shape in shapes:
        for dtype in DTYPES:
            cases.append((shape, dtype, "none"))
        for recipe in ("delayed", "current", "block"):
            cases.append((shape, "bf16", recipe))
    return cases


def _run_fresh(device, shape, dtype_name, recipe_name, seed, fused=False):
    gen = torch.Generator()
    gen.manual_seed(seed)
    groups, rows, k, n = shape
    dtype = DTYPES[dtype_name]
    module = grouped_linear.GroupedLinear(groups, k, n, params_dtype=dtype, device=device,
                                          fuse_wgrad_accumulation=fused)
    set_params(module, gen)
    if fused:
        module.weight.main_grad = torch.zeros(groups, n, k, device=device)
    splits, x, dy = _problem(gen, device, dtype, groups, rows, k, n)
    recipe = RECIPES[recipe_name]()
    results = []
    for _ in range(2):  # two steps: delayed scaling's second uses scales from the first
        results += _step(module, x, splits, dy, recipe, grads_only=False)[:2]
    results += [module.weight.grad if not fused else module.weight.main_grad, module.bias.grad]
    if recipe_name == "delayed":
        results += [module._fp8_state.scale_fwd, module._fp8_state.amax_history_fwd]
    return [r.detach().cpu().clone() for r in results]


def _determinism(device, engines, deterministic_mode):
    table = {}
    for engine in engines:
        ops.set_engine_override(device, engine)
        try:
            for shape, dtype, recipe in _determinism_cases(device):
                key = f"{engine} G{shape[0]}-T{shape[1]}-K{shape[2]}-N{shape[3]} {dtype} {recipe}"
                first = _run_fresh(device, shape, dtype, recipe, 7)
                again = [_run_fresh(device, shape, dtype, recipe, 7) for _ in range(2)]
                table[key] = all(_bitwise_equal(a, b) for run in again for a, b in zip(first, run))
        finally:
            ops.set_engine_override(device, "")
    record("determinism", f"{device}_{'deterministic' if deterministic_mode else 'default'}",
           table)
    return table


def test_bitwise_reproducible_cpu_deterministic_mode(deterministic):
    table = _determinism("cpu", ops.engine_names("cpu"), True)
    assert table and all(table.values()), [k for k, v in table.items() if not v]


def test_bitwise_reproducible_cuda_deterministic_mode(deterministic):
    _require_cuda()
    table = _determinism(GPU, _cuda_engines(), True)
    assert table and all(table.values()), [k for k, v in table.items() if not v]


def test_bitwise_reproducible_cuda_default_mode():
    """Without deterministic mode the library takes the same paths (it does not
    consult the flag): documented as reproducible run to run too."""
    _require_cuda()
    assert not torch.are_deterministic_algorithms_enabled()
    table = _determinism(GPU, _cuda_engines(), False)
    assert table and all(table.values()), [k for k, v in table.items() if not v]


def test_fused_main_grad_reproducible(device):
    """main_grad accumulation (float32 epilogue / accumulate) is reproducible too."""
    shape = (4, 200, 64, 48) if device == "cuda" else (4, 60, 24, 16)
    a = _run_fresh(device, shape, "bf16", "none", 11, fused=True)
    b = _run_fresh(device, shape, "bf16", "none", 11, fused=True)
    assert all(_bitwise_equal(x, y) for x, y in zip(a, b))


# --- concurrency ----------------------------------------------------------------------------

def _run_threads(bodies):
    """Run each callable in its own thread, started together; re-raise errors."""
    barrier = threading.Barrier(len(bodies))
    results, errors = [None] * len(bodies), []

    def wrap(i, body):
        try:
            barrier.wait()
            results[i] = body()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i, b)) for i, b in enumerate(bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def _shared_module_inputs(gen, device, dtype, count, groups=6, rows=192, k=48, n=40):
    module = grouped_linear.GroupedLinear(groups, k, n, params_dtype=dtype, device=device)
    set_params(module, gen)
    inputs = [_problem(gen, device, dtype, groups, rows, k, n) for _ in range(count)]
    return module, inputs


REPEATS = 8


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_two_threads_cpu_shared_module(dtype, gen):
    """Two threads run forward+backward of one module (shared parameters,
    gradients through autograd.grad) on different inputs: each thread's
    results equal the serial ones, bitwise, on every repeat."""
    module, inputs = _shared_module_inputs(gen, "cpu", DTYPES[dtype], 2)
    serial = [_step(module, x, s, dy, None) for s, x, dy in inputs]

    def body(i):
        s, x, dy = inputs[i]
        return [_step(module, x, s, dy, None) for _ in range(REPEATS)]

    got = _run_threads([lambda i=i: body(i) for i in range(2)])
    for i in range(2):
        for rep in got[i]:
            _assert_all_equal(serial[i], rep, f"thread {i}")
    record("concurrency", f"cpu_two_threads_{dtype}", dict(threads=2, repeats=REPEATS, equal=True))


def _fp8_threads_match_serial(gen, device, dtype, recipe_name, shape, streams=False):
    """Three FP8 steps in each of two threads (own module copies; on CUDA each
    thread on its own stream) equal the same steps run serially on copies.
    Returns the copies (serial 0, 1; threads 2, 3)."""
    module, inputs = _shared_module_inputs(gen, device, dtype, 2, **shape)
    recipe = RECIPES[recipe_name]()
    copies = [copy.deepcopy(module) for _ in range(4)]

    def steps(mod, i):
        s, x, dy = inputs[i]
        return [_step(mod, x, s, dy, recipe) for _ in range(3)]

    serial = [steps(copies[0], 0), steps(copies[1], 1)]
    if streams:
        torch.cuda.synchronize()
        side = [torch.cuda.Stream(), torch.cuda.Stream()]
        got = _run_threads([lambda i=i: _on_stream(side[i], lambda: steps(copies[2 + i], i))
                            for i in range(2)])
    else:
        got = _run_threads([lambda i=i: steps(copies[2 + i], i) for i in range(2)])
    for i in range(2):
        for a, b in zip(serial[i], got[i]):
            _assert_all_equal(a, b, f"FP8 {recipe_name} thread {i}")
    return copies


@pytest.mark.parametrize("recipe_name", ["delayed", "current", "block"])
def test_two_threads_cpu_fp8_own_modules(recipe_name, gen):
    """FP8 in two threads at once, each with its own module (a module's FP8
    state is not shared between threads; autocast regions are per thread):
    every step equals the same steps run serially on a copy."""
    copies = _fp8_threads_match_serial(gen, "cpu", torch.float32, recipe_name, {})
    if recipe_name == "delayed":
        assert torch.equal(copies[0]._fp8_state.scale_fwd, copies[2]._fp8_state.scale_fwd)
    record("concurrency", f"cpu_two_threads_fp8_{recipe_name}", dict(threads=2, equal=True))


@pytest.mark.parametrize("recipe_name", ["delayed", "current", "block"])
def test_one_fp8_module_in_two_threads_is_refused(recipe_name, gen):
    """One module under FP8 in two threads at once: while the first thread's
    autocast region holds the module's FP8 state, the second thread's call
    raises RuntimeError naming the module, before any cast (its amax history
    is unchanged). Once that region has exited the second thread runs the
    module, and its step equals the same step run serially on a copy."""
    module, inputs = _shared_module_inputs(gen, "cpu", torch.float32, 2)
    recipe = RECIPES[recipe_name]()
    reference = copy.deepcopy(module)
    (s0, x0, _), (s1, x1, dy1) = inputs
    holding, refused, released = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def owner():
        with grouped_linear.autocast(recipe=recipe):
            with torch.no_grad():
                module(x0, s0)
            holding.set()
            assert refused.wait(timeout=60), "the second thread never tried"
        released.set()

    def intruder():
        assert holding.wait(timeout=60), "the first thread never ran"
        try:
            history = module._fp8_state.amax_history_fwd
            before = None if history is None else history.clone()
            with grouped_linear.autocast(recipe=recipe):
                with pytest.raises(RuntimeError, match="another thread") as err:
                    module(x1, s1)
            seen["message"] = str(err.value)
            after = module._fp8_state.amax_history_fwd
            seen["history_unchanged"] = before is None or torch.equal(before, after)
        finally:
            refused.set()
        assert released.wait(timeout=60), "the first thread never left its region"
        return _step(module, x1, s1, dy1, recipe)

    got = _run_threads([owner, intruder])[1]
    assert "GroupedLinear" in seen["message"], seen["message"]
    assert seen["history_unchanged"], "the refused call recorded an amax"
    # The reference copy sees the same sequence: the first thread's forward,
    # then the second thread's step, serially.
    with grouped_linear.autocast(recipe=recipe):
        with torch.no_grad():
            reference(x0, s0)
    expected = _step(reference, x1, s1, dy1, recipe)
    for a, b in zip(expected, got):
        _assert_all_equal(a, b, f"FP8 {recipe_name}: the step after the hand-over")
    record("concurrency", f"cpu_one_fp8_module_two_threads_{recipe_name}",
           dict(threads=2, refused=True, equal=True))


def test_checkpoint_load_into_a_module_another_thread_holds_is_refused(gen):
    """While one thread's autocast region holds a module's FP8 state, loading
    a checkpoint into that module from another thread raises RuntimeError
    before anything is copied (parameters and FP8 state unchanged); once the
    region has exited the same load works."""
    module, ((s0, x0, _),) = _shared_module_inputs(gen, "cpu", torch.float32, 1)
    recipe = RECIPES["delayed"]()
    source = copy.deepcopy(module)
    with torch.no_grad():
        source.weight.add_(1.0)
    with grouped_linear.autocast(recipe=recipe), torch.no_grad():
        source(x0, s0)
    checkpoint = source.state_dict()
    holding, tried = threading.Event(), threading.Event()

    def owner():
        with grouped_linear.autocast(recipe=recipe):
            with torch.no_grad():
                module(x0, s0)
            holding.set()
            assert tried.wait(timeout=60), "the loading thread never tried"

    seen = {}

    def loader():
        assert holding.wait(timeout=60), "the first thread never ran"
        try:
            weight, state = module.weight.detach().clone(), module.get_extra_state().clone()
            with pytest.raises(RuntimeError, match="another thread.*checkpoint cannot be loaded"):
                module.load_state_dict(checkpoint)
            with pytest.raises(RuntimeError, match="another thread"):
                module.set_extra_state(checkpoint["_extra_state"])
            seen["unchanged"] = (torch.equal(module.weight, weight)
                                 and torch.equal(module.get_extra_state(), state))
        finally:
            tried.set()

    _run_threads([owner, loader])
    assert seen["unchanged"], "the refused load changed the module"
    module.load_state_dict(checkpoint)  # the region has exited
    assert torch.equal(module.weight, source.weight)
    assert torch.equal(module.get_extra_state(), source.get_extra_state())


def _on_stream(stream, fn):
    with torch.cuda.stream(stream):
        result = fn()
    stream.synchronize()
    return result


def test_two_threads_two_streams_cuda(cuda_engine, gen):
    """Two threads, each on its own CUDA stream, run forward+backward of one
    bf16 module concurrently; results equal the serial (default stream) ones."""
    module, inputs = _shared_module_inputs(gen, GPU, torch.bfloat16, 2, groups=8, rows=1024,
                                           k=256, n=128)
    inputs = [(torch.tensor(s, device=GPU) if i == 1 else s, x, dy)
              for i, (s, x, dy) in enumerate(inputs)]  # device and host m_splits
    serial = [_step(module, x, s, dy, None) for s, x, dy in inputs]
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]

    def body(i):
        s, x, dy = inputs[i]
        return _on_stream(streams[i], lambda: [_step(module, x, s, dy, None)
                                               for _ in range(REPEATS)])

    got = _run_threads([lambda i=i: body(i) for i in range(2)])
    for i in range(2):
        for rep in got[i]:
            _assert_all_equal(serial[i], rep, f"{cuda_engine} thread {i} on its stream")
    record("concurrency", f"cuda_two_threads_two_streams_{cuda_engine}",
           dict(threads=2, streams=2, repeats=REPEATS, equal=True))


def test_one_thread_two_streams_in_flight_cuda(cuda_engine, gen):
    """One thread issues calls on two streams alternately without waiting, so
    both streams have work in flight at once; each stream's results equal the
    serial ones (a workspace shared by the streams would be overwritten)."""
    device = GPU
    groups, rows, k, n = 8, 2048, 512, 256
    x = randn(gen, rows, k, dtype=torch.bfloat16, device=device)
    w = randn(gen, groups, n, k, dtype=torch.bfloat16, device=device, scale=k ** -0.5)
    dy = randn(gen, rows, n, dtype=torch.bfloat16, device=device)
    splits = [make_splits(gen, rows, groups, kind) for kind in ("random_with_zeros", "one_group_all")]
    expected = [(ops.forward(x, w, None, s), ops.dgrad(dy, w, s), ops.wgrad(dy, x, s)[0])
                for s in splits]
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = [[], []]
    for _ in range(REPEATS):
        for i, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                outs[i].append((ops.forward(x, w, None, splits[i]), ops.dgrad(dy, w, splits[i]),
                                ops.wgrad(dy, x, splits[i])[0]))
    for stream in streams:
        stream.synchronize()
    for i in range(2):
        for rep in outs[i]:
            for e, g, name in zip(expected[i], rep, ["forward", "dgrad", "wgrad"]):
                assert _bitwise_equal(e, g), f"{cuda_engine} stream {i} {name} differs"
    record("concurrency", f"cuda_one_thread_two_streams_{cuda_engine}",
           dict(streams=2, repeats=REPEATS, equal=True))


@pytest.mark.parametrize("recipe_name", ["delayed", "block"])
def test_two_threads_two_streams_cuda_fp8(recipe_name, gen):
    """FP8 on two streams from two threads, a module per thread."""
    _require_cuda()
    _fp8_threads_match_serial(gen, GPU, torch.bfloat16, recipe_name,
                              dict(groups=8, rows=1024, k=256, n=128), streams=True)
    record("concurrency", f"cuda_two_threads_two_streams_fp8_{recipe_name}",
           dict(threads=2, streams=2, equal=True))


def test_two_devices_cuda(gen):
    """Two threads, one per GPU, each with the module's copy on its device."""
    _require_cuda()
    count = torch.cuda.device_count()
    if count < 2:
        record("concurrency", "cuda_two_devices", dict(skipped=f"needs 2 GPUs, found {count}"))
        pytest.skip(f"needs two GPUs (found {count})")
    module, inputs = _shared_module_inputs(gen, "cuda:0", torch.bfloat16, 2, groups=8, rows=1024,
                                           k=256, n=128)
    mods = [module, copy.deepcopy(module).to("cuda:1")]
    inputs = [(s, x.to(f"cuda:{i}"), dy.to(f"cuda:{i}")) for i, (s, x, dy) in enumerate(inputs)]
    serial = [_step(mods[i], inputs[i][1], inputs[i][0], inputs[i][2], None) for i in range(2)]
    for i in range(2):
        torch.cuda.synchronize(i)

    def body(i):
        with torch.cuda.device(i):
            stream = torch.cuda.Stream()
            s, x, dy = inputs[i]
            return _on_stream(stream, lambda: [_step(mods[i], x, s, dy, None)
                                               for _ in range(REPEATS)])

    got = _run_threads([lambda i=i: body(i) for i in range(2)])
    for i in range(2):
        for rep in got[i]:
            _assert_all_equal(serial[i], rep, f"device {i}")
    # Another device current while calling: the module's device is used.
    with torch.cuda.device(1):
        again = _step(mods[0], inputs[0][1], inputs[0][0], inputs[0][2], None)
    _assert_all_equal(serial[0], again, "cuda:0 module called with cuda:1 current")
    record("concurrency", "cuda_two_devices", dict(devices=2, repeats=REPEATS, equal=True))
