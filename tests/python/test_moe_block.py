"""The MoE expert block example (examples/moe_block.py) and the diagnostics.

CPU (and every CUDA engine, through the `device` fixture): the block against
its plain PyTorch per-expert loop, forward and backward; routing invariants;
empty experts; top-k 1 and 2; FP8 (emulated on the CPU); the demo's training
loop. CUDA only (skipped without a GPU, and where the engine reads device
m_splits back with a sync): no device-to-host sync in forward+backward, and
the whole block under torch.cuda.make_graphed_callables and under
torch.cuda.graph capture + replay. Diagnostics: GROUPED_LINEAR_LOG_LEVEL and
GROUPED_LINEAR_NVTX, each read once per process, so checked in subprocesses.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import grouped_linear
from gl_testutil import assert_close_rel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
import moe_block  # noqa: E402
from moe_block import MoEBlock, reference_forward, route  # noqa: E402

H, FFN, E, T = 32, 48, 6, 40
# Block vs its per-expert loop: a chain of products, activations and a
# weighted sum. float32: both accumulate in float32, differences are
# rounding-order only. bfloat16: every product rounds its output once (1e-2
# per product, conftest.py) on both sides, through two GEMMs and SwiGLU.
BLOCK_TOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2}


def _block(device, dtype, gen, top_k=2, hidden=H, ffn=FFN, experts=E, bias=True):
    block = MoEBlock(hidden, ffn, experts, top_k, bias=bias, dtype=dtype, device=device)
    block.reset_parameters(gen)
    return block


def _x(gen, tokens, hidden, dtype, device):
    return torch.randn(tokens, hidden, generator=gen).to(device=device, dtype=dtype)


def _grads(block, x, dy, fn):
    """Output and gradients (x, then every parameter) of fn(block, x)."""
    x = x.detach().clone().requires_grad_(True)
    params = [p for p in block.parameters()]
    out = fn(block, x)
    grads = torch.autograd.grad(out, [x] + params, dy)
    return out.detach(), grads


def _names(block):
    return ["x"] + [name for name, _ in block.named_parameters()]


def _check_matches_reference(block, x, dy, dtype):
    got_out, got = _grads(block, x, dy, lambda b, v: b(v))
    ref_out, ref = _grads(block, x, dy, reference_forward)
    tol = BLOCK_TOL[dtype]
    assert_close_rel(got_out, ref_out, dtype, "out", tol)
    for name, g, r in zip(_names(block), got, ref):
        assert_close_rel(g, r, dtype, f"grad of {name}", tol)
    return got


@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_block_matches_plain_reference(device, dtype, top_k, gen):
    block = _block(device, dtype, gen, top_k)
    x = _x(gen, T, H, dtype, device)
    dy = _x(gen, T, H, dtype, device)
    grads = _check_matches_reference(block, x, dy, dtype)
    for name, g in zip(_names(block), grads):
        assert torch.count_nonzero(g) > 0, f"grad of {name} is all zero"


def test_route_permutation_invariants(gen):
    tokens, experts, top_k = 50, 7, 2
    logits = torch.randn(tokens, experts, generator=gen)
    r = route(logits, top_k)
    flat = r.experts.reshape(-1)
    assert r.counts.dtype == torch.int64 and r.counts.shape == (experts,)
    assert torch.equal(r.counts, torch.bincount(flat, minlength=experts))
    assert int(r.counts.sum()) == tokens * top_k
    sorted_ids = flat[r.order]
    assert torch.all(sorted_ids[1:] >= sorted_ids[:-1]), "not grouped by expert"
    same = sorted_ids[1:] == sorted_ids[:-1]
    assert torch.all(r.order[1:][same] > r.order[:-1][same]), "argsort is not stable"
    assert torch.equal(r.order[r.inverse], torch.arange(tokens * top_k))
    assert torch.equal(r.tokens, r.order // top_k)
    # Combine weights: the renormalised top-k of the softmax, largest first.
    assert torch.allclose(r.probs.sum(-1), torch.ones(tokens))
    top1 = route(logits, 1)
    assert torch.allclose(top1.probs[:, 0], torch.softmax(logits, -1).max(-1).values)
    assert torch.all(r.probs[:, :-1] >= r.probs[:, 1:])


@pytest.mark.parametrize("top_k", [1, 2])
def test_empty_experts(device, top_k, gen):
    """Routing leaves experts 3..E-1 without tokens: their products are empty
    groups, whose weight and bias gradients must be exactly zero."""
    dtype = torch.float32
    block = _block(device, dtype, gen, top_k)
    with torch.no_grad():
        block.router.weight.zero_()
        block.router.weight[:3] = torch.rand(3, H, generator=gen).to(device) + 0.5
    x = _x(gen, T, H, dtype, device).abs() + 0.1        # positive: logits of experts 0..2 > 0
    counts = block.route(x).counts.cpu()
    assert torch.all(counts[3:] == 0) and int(counts.sum()) == T * top_k
    dy = _x(gen, T, H, dtype, device)
    grads = dict(zip(_names(block), _check_matches_reference(block, x, dy, dtype)))
    for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"):
        assert torch.count_nonzero(grads[name][3:]) == 0, f"{name}: empty experts' grads not zero"
        assert torch.count_nonzero(grads[name][:3]) > 0, f"{name}: used experts' grads are zero"


def test_all_tokens_to_one_expert(device, gen):
    block = _block(device, torch.float32, gen, top_k=1)
    with torch.no_grad():
        block.router.weight.zero_()
        block.router.weight[4] = 1.0
    x = _x(gen, T, H, torch.float32, device).abs() + 0.1
    counts = block.route(x).counts.cpu()
    assert counts.tolist() == [0, 0, 0, 0, T, 0]
    _check_matches_reference(block, x, _x(gen, T, H, torch.float32, device), torch.float32)


def test_leading_dims_and_no_bias(device, gen):
    block = _block(device, torch.float32, gen, bias=False)
    x = torch.randn(2, 5, H, generator=gen).to(device)
    out = block(x)
    assert out.shape == (2, 5, H)
    assert_close_rel(out, reference_forward(block, x), torch.float32, "out", BLOCK_TOL[torch.float32])


def test_bad_top_k():
    with pytest.raises(ValueError, match="top_k"):
        MoEBlock(H, FFN, 4, top_k=5, dtype=torch.float32, device="cpu")


@pytest.mark.parametrize("recipe", ["delayed", "current"])
def test_fp8_block_runs_on_cpu(recipe, gen):
    """FP8 (CPU emulation): forward+backward within FP8 error of the bf16
    reference, and the delayed-scaling state moves at the step boundary."""
    dtype = torch.bfloat16
    block = _block("cpu", dtype, gen)
    x = _x(gen, T, H, dtype, "cpu")
    dy = _x(gen, T, H, dtype, "cpu")
    fp8_recipe = (grouped_linear.fp8.DelayedScaling() if recipe == "delayed"
                  else grouped_linear.fp8.Float8CurrentScaling())

    def fp8_fn(b, v):
        with grouped_linear.autocast(enabled=True, recipe=fp8_recipe):
            return b(v)

    state_before = torch.as_tensor(block.fc1.get_extra_state()).clone()
    for _ in range(2):  # delayed scaling: the second step uses scales from the first
        out, grads = _grads(block, x, dy, fp8_fn)
    ref_out, ref = _grads(block, x, dy, reference_forward)
    # E4M3 keeps 3 mantissa bits (2^-4 relative per element), E5M2 gradients 2.
    assert_close_rel(out, ref_out, dtype, "FP8 out", 0.15)
    for name, g, r in zip(_names(block), grads, ref):
        assert_close_rel(g, r, dtype, f"FP8 grad of {name}", 0.3)
    if recipe == "delayed":  # amax history and scales moved at the step boundaries
        state_after = torch.as_tensor(block.fc1.get_extra_state())
        assert not torch.equal(state_after, state_before)


def test_demo_trains_on_cpu():
    losses, plain = moe_block.main(["--device", "cpu", "--steps", "40", "--log-every", "10",
                                    "--tokens", "64", "--hidden", "32", "--ffn", "32",
                                    "--experts", "4"])
    assert sorted(losses) == [1, 10, 20, 30, 40]
    assert losses[40] < 0.8 * losses[1], f"the loss did not go down: {losses}"
    # Same initial weights, same batches, float32: the plain loop follows the same path.
    for step in losses:
        assert abs(losses[step] - plain[step]) <= 1e-3 * max(1.0, plain[step])


def test_demo_fp8_and_bf16_on_cpu():
    args = ["--device", "cpu", "--steps", "30", "--log-every", "10", "--tokens", "64",
            "--hidden", "32", "--ffn", "32", "--experts", "4", "--dtype", "bf16"]
    losses, plain = moe_block.main(args + ["--fp8"])
    assert all(torch.isfinite(torch.tensor(v)) for v in losses.values())
    assert losses[30] < losses[1]
    assert abs(losses[1] - plain[1]) < 0.1 * plain[1], "FP8 first loss far from bf16's"


def test_demo_script_runs():
    proc = subprocess.run([sys.executable, str(EXAMPLES / "moe_block.py"), "--device", "cpu",
                           "--steps", "6", "--log-every", "3", "--tokens", "16", "--hidden", "16",
                           "--ffn", "16", "--experts", "4"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "mean step time: grouped_linear" in proc.stdout
    assert "plain PyTorch (per-expert loop)" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.split()[:1] in (["3"], ["6"])]
    assert len(rows) == 2, proc.stdout


# ----------------------------------------------------------------------------
# CUDA: no sync, CUDA graphs.

def _sm90_block(gen, dtype=torch.bfloat16):
    """A block on an engine that reads device m_splits without a sync."""
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    if not grouped_linear.with_cuda:
        pytest.skip("grouped_linear was built without CUDA")
    engine = grouped_linear.engine_for("cuda")
    if engine != "sm90_grouped":
        pytest.skip(f"engine {engine} reads device m_splits back with a stream sync "
                    "(documented): not sync-free, not capturable with device splits")
    # Sizes the grouped kernels take (multiples of 8/16), not the CPU tests' ones.
    return _block("cuda", dtype, gen, top_k=2, hidden=64, ffn=128, experts=8)


def test_forward_backward_has_no_device_to_host_sync(gen):
    block = _sm90_block(gen)
    x = _x(gen, 256, 64, torch.bfloat16, "cuda").requires_grad_(True)
    dy = _x(gen, 256, 64, torch.bfloat16, "cuda")
    block(x).backward(dy)                     # first call: lazy setup outside the check
    torch.cuda.synchronize()
    x.grad = None
    block.zero_grad(set_to_none=True)
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = block(x)
        out.backward(dy)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    assert x.grad is not None and block.fc1.weight.grad is not None
    assert torch.isfinite(out.float()).all()


def _eager(block, x, dy):
    """Eager output and gradients, without touching any .grad (a captured
    graph keeps writing the .grad tensors it captured)."""
    out, grads = _grads(block, x, dy.detach(), lambda b, v: b(v))
    names = _names(block)
    return out, grads[0], dict(zip(names[1:], grads[1:]))


def _assert_matches_eager(out, dx, grads, expected, what):
    e_out, e_dx, e_grads = expected
    # The forward has no atomics: bit-identical. dx sums top_k rows per token
    # through index_add (atomics on CUDA): the order may differ, so rounding may.
    assert torch.equal(out, e_out), f"{what}: output differs from eager"
    assert_close_rel(dx, e_dx, torch.bfloat16, f"{what}: dx", 1e-2)
    for name, g in grads.items():
        assert_close_rel(g, e_grads[name], torch.bfloat16, f"{what}: grad of {name}", 1e-2)


def test_make_graphed_callables(gen):
    block = _sm90_block(gen)
    tokens = 256
    sample = _x(gen, tokens, 64, torch.bfloat16, "cuda").requires_grad_(True)
    graphed = torch.cuda.make_graphed_callables(block, (sample,))
    for replay in range(3):
        x = _x(gen, tokens, 64, torch.bfloat16, "cuda").requires_grad_(True)
        dy = _x(gen, tokens, 64, torch.bfloat16, "cuda")
        block.zero_grad(set_to_none=True)
        out = graphed(x)
        out.backward(dy)
        got = (out.detach().clone(), x.grad.clone(),
               {n: p.grad.clone() for n, p in block.named_parameters()})
        expected = _eager(block, x, dy)
        _assert_matches_eager(*got, expected, f"make_graphed_callables call {replay}")


def test_cuda_graph_capture_and_replay(gen):
    block = _sm90_block(gen)
    tokens = 256
    static_x = _x(gen, tokens, 64, torch.bfloat16, "cuda").requires_grad_(True)
    static_dy = _x(gen, tokens, 64, torch.bfloat16, "cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):                  # warm-up on the capture stream
        for _ in range(2):
            static_x.grad = None
            block.zero_grad(set_to_none=True)
            block(static_x).backward(static_dy)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    static_x.grad = None
    block.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        static_out = block(static_x)
        static_out.backward(static_dy)
    torch.cuda.synchronize()

    routings = set()
    for replay in range(3):
        with torch.no_grad():                        # new tokens: new routing, same graph
            static_x.copy_(_x(gen, tokens, 64, torch.bfloat16, "cpu"))
            static_dy.copy_(_x(gen, tokens, 64, torch.bfloat16, "cpu"))
        graph.replay()
        torch.cuda.synchronize()
        got = (static_out.detach().clone(), static_x.grad.clone(),
               {n: p.grad.clone() for n, p in block.named_parameters()})
        routings.add(tuple(block.route(static_x.detach()).counts.tolist()))
        expected = _eager(block, static_x, static_dy)
        _assert_matches_eager(*got, expected, f"replay {replay}")
    assert len(routings) > 1, "the replays did not exercise different m_splits"


# ----------------------------------------------------------------------------
# Diagnostics: environment variables read once per process.

_LOG_SCRIPT = textwrap.dedent("""
    import sys, torch, grouped_linear as gl
    device, dtype, k = sys.argv[1], getattr(torch, sys.argv[2]), int(sys.argv[3])
    m = gl.GroupedLinear(4, k, 16, params_dtype=dtype, device=device)
    x = torch.randn(24, k, dtype=dtype, device=device, requires_grad=True)
    splits = torch.tensor([8, 0, 10, 6], device=device)
    for _ in range(2):
        m(x, splits).float().sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
    print(gl._C.diagnostics())
""")


def _run_logged(env_updates, device="cpu", dtype="bfloat16", k=32):
    env = dict(os.environ)
    env.pop("GROUPED_LINEAR_LOG_LEVEL", None)
    env.pop("GROUPED_LINEAR_NVTX", None)
    env.update(env_updates)
    proc = subprocess.run([sys.executable, "-c", _LOG_SCRIPT, device, dtype, str(k)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("[grouped_linear")]
    return lines, proc.stdout


def test_log_level_info_names_the_engine_once():
    lines, out = _run_logged({"GROUPED_LINEAR_LOG_LEVEL": "info"})
    assert "'log_level': 'info'" in out
    for role in ("forward", "dgrad", "wgrad"):
        mine = [line for line in lines if f"] {role}: engine cpu_reference on cpu" in line]
        # Two identical calls: info prints each distinct message once.
        assert len(mine) == 1, lines
        assert "m_splits on the host" in mine[0] and "G=4" in mine[0] and "K=32" in mine[0]
    assert all(line.startswith("[grouped_linear info] ") for line in lines), lines


def test_log_level_debug_prints_every_call_and_off_prints_nothing():
    lines, _ = _run_logged({"GROUPED_LINEAR_LOG_LEVEL": "debug"})
    assert len([line for line in lines if "forward: engine cpu_reference" in line]) == 2, lines
    lines, out = _run_logged({})
    assert lines == [] and "'log_level': 'warn'" in out
    lines, out = _run_logged({"GROUPED_LINEAR_LOG_LEVEL": "loud"})
    assert "'log_level': 'warn'" in out
    assert len(lines) == 1 and "GROUPED_LINEAR_LOG_LEVEL='loud' is not a level" in lines[0]


def test_nvtx_switch():
    lines, out = _run_logged({})
    diag = eval(out.strip().splitlines()[-1])   # the dict printed by the script
    assert diag["nvtx_enabled"] is False
    lines, out = _run_logged({"GROUPED_LINEAR_NVTX": "1"})
    diag = eval(out.strip().splitlines()[-1])
    # On only where compiled in (CUDA builds that found nvtx3); else one warning.
    assert diag["nvtx_enabled"] is diag["nvtx_compiled"]
    if not diag["nvtx_compiled"]:
        assert any("GROUPED_LINEAR_NVTX is set but this build has no NVTX" in l for l in lines)


def _need_cuda():
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    if not grouped_linear.with_cuda:
        pytest.skip("grouped_linear was built without CUDA")


def test_log_names_cuda_engine_and_kernel():
    _need_cuda()
    engine = grouped_linear.engine_for("cuda")
    lines, _ = _run_logged({"GROUPED_LINEAR_LOG_LEVEL": "info"}, device="cuda")
    assert any(f"forward: engine {engine} on cuda" in line for line in lines), lines
    if engine == "sm90_grouped":
        for role in ("forward", "dgrad", "wgrad"):
            assert any(f"{role}: sm90_grouped kernel {role}_bf16_" in line and
                       "sizes on the device" in line for line in lines), lines
        # K = 36 is not a multiple of 8: the grouped kernels hand the problem to cuBLAS.
        lines, _ = _run_logged({"GROUPED_LINEAR_LOG_LEVEL": "info"}, device="cuda", k=36)
        assert any("forward: sm90_grouped fell back to cublas: K=36 not a multiple of 8" in line
                   for line in lines), lines
        assert any("forward: cublas, one cublasGemmEx per non-empty group" in line
                   for line in lines), lines
    else:
        assert any("forward: cublas" in line for line in lines), lines


def test_nvtx_ranges_on_cuda():
    """With the switch on, a CUDA build compiled with NVTX reports it active
    and the block still runs (whether the ranges reach a profiler needs nsys,
    which this test does not run)."""
    _need_cuda()
    lines, out = _run_logged({"GROUPED_LINEAR_NVTX": "1"}, device="cuda")
    diag = eval(out.strip().splitlines()[-1])
    assert diag["nvtx_enabled"] is diag["nvtx_compiled"]
    if not diag["nvtx_compiled"]:
        pytest.skip("this CUDA build found no nvtx3 headers: ranges compiled out")


_FP8_ACCUMULATION_SCRIPT = textwrap.dedent("""
    import sys, torch, grouped_linear as gl
    from grouped_linear.fp8 import MMParams
    m = gl.GroupedLinear(4, 256, 512, params_dtype=torch.bfloat16, device="cuda")
    x = torch.randn(1024, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    fprop = MMParams(use_split_accumulator=sys.argv[1] == "split")
    with gl.autocast(recipe=gl.fp8.DelayedScaling(fp8_gemm_fprop=fprop)):
        y = m(x, [256, 0, 512, 256])
    y.float().sum().backward()
    torch.cuda.synchronize()
""")


def test_recipe_gemm_params_choose_the_accumulation():
    """The recipe's use_split_accumulator reaches the kernel choice: TE's
    default runs the forward with a fast-accumulation kernel and both
    gradients with promoting ones; MMParams(True) for fprop promotes too."""
    _need_cuda()
    if grouped_linear.engine_for("cuda") != "sm90_grouped":
        pytest.skip("the fast-accumulation kernels belong to the sm90_grouped engine")
    env = dict(os.environ, GROUPED_LINEAR_LOG_LEVEL="info")
    env.pop("GROUPED_LINEAR_NVTX", None)
    for fprop in ("fast", "split"):
        proc = subprocess.run([sys.executable, "-c", _FP8_ACCUMULATION_SCRIPT, fprop],
                              capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        for role in ("forward", "dgrad", "wgrad"):
            mine = [line for line in proc.stderr.splitlines()
                    if f"{role}: FP8 sm90_grouped kernel {role}_" in line]
            assert len(mine) == 1, proc.stderr
            assert ("_fast" in mine[0]) == (role == "forward" and fprop == "fast"), mine[0]


_FP8_LOG_SCRIPT = textwrap.dedent("""
    import torch, grouped_linear as gl
    m = gl.GroupedLinear(2, 32, 16, params_dtype=torch.float32, device="cpu")
    x = torch.randn(12, 32, requires_grad=True)
    with gl.autocast(recipe=gl.fp8.Float8CurrentScaling()):
        y = m(x, [5, 7])
    y.sum().backward()
""")


def test_log_level_info_says_when_fp8_is_emulated():
    env = dict(os.environ)
    env.pop("GROUPED_LINEAR_NVTX", None)
    env["GROUPED_LINEAR_LOG_LEVEL"] = "info"
    proc = subprocess.run([sys.executable, "-c", _FP8_LOG_SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "running the emulation" in line]
    # The CPU engine has no FP8 kernels: each role says so, once.
    for role in ("forward", "dgrad", "wgrad"):
        mine = [line for line in lines if line.startswith(f"[grouped_linear info] FP8 {role}: "
                                                           "engine cpu_reference")]
        assert len(mine) == 1, proc.stderr
