"""Seeded fuzzing of GroupedLinear: random problems, every quantity checked
against a float64 reference.

Each case draws, from its own seed: G in 1..256; K and N (multiples of 8,
16 and 128, values a few off a multiple of 16, and any value); T rows
(zero included) spread over the groups with empty groups, one group holding
(nearly) everything, or random sizes; dtype (fp32 / fp16 / bf16); bias on
or off; fuse_wgrad_accumulation (main_grad) on or off; the recipe (none,
delayed, current, block scaling); m_splits as a list, a host tensor or a
device tensor; 2-D or 3-D input; input with or without requires_grad; the
FP8 GEMMs' accumulation (the recipe's defaults, every GEMM with fast
accumulation, or every GEMM promoting: the recipes' fp8_gemm_* MMParams);
and, on CUDA, the engine (the default or another built one).

Checked: forward output, dgrad, wgrad (weight.grad, or the main_grad
increment) and the bias gradient; empty groups give exactly zero gradients
(main_grad unchanged). No size is refused by the library: FP8 problems whose
K or N the grouped FP8 kernels do not take (not multiples of 16) run in the
emulated FP8 path, so every drawn case must compute (an error is a failure).

Tolerances (relative Frobenius error against float64 on the CPU):
* Without FP8: conftest.TOLERANCE of the dtype (fp32 1e-5, fp16 2e-3,
  bf16 1e-2), the reference computed from the very same low-precision
  inputs, so only the library's float32 accumulation and its one rounding
  to the output dtype are measured (see conftest for the derivation). With
  K <= 640 and groups of <= 4096 rows, float32 summation errs by about
  u32 * sqrt(length) < 4e-6 relative, inside the fp32 bound.
* main_grad increments (float32 sums into a float32 buffer): the float32
  bound 1e-5 (prior values of the size of dW, so the addition costs
  ~1e-7); under FP8 fp8_testutil.FP8_FP32_TOLERANCE (3e-4), as for every
  float32 result of the FP8 kernels: the tensor core's reduced accumulator
  width inside each 128-deep k-block.
* FP8, primary: against float64 products of the values the casts produce
  (fp8_testutil.dequantized_operands, the CPU quantization reference):
  again conftest.TOLERANCE of the output dtype. A wrong scale, format,
  block or group is off by >= 2^-4 relative.
* FP8, secondary (against the unquantized inputs): each product term a*b
  is off by at most (u_a + u_b + u_a u_b) |a b| (u = 2^-4 for E4M3, 2^-3
  for E5M2, half a step), so ||out - ref|| <= that * || |A| |B| ||, plus
  the output rounding; checked norm-wise against || |A| |B| (+ |bias|) ||,
  with 1e-3 for FP8 subnormals (absolute errors <= amax * 2^-10 / 448).
  Unlike a bound relative to ||ref||, this one holds for any size, also for
  one-element products whose terms cancel.
* The bias gradient is summed from the unquantized dY: TOLERANCE of the dtype.
* Fast accumulation (use_split_accumulator=False) is held to the same
  bounds: at these depths (K, N <= 640, groups <= 4096 rows) the tensor
  core's accumulator stays inside the output dtype's tolerance
  (test_sm90_fp8_kernels checks 8192-deep reductions against bf16's).

Environment: GL_FUZZ_SEED (base seed), GL_FUZZ_CASES (count; default 40 on
the CPU, 1000 on CUDA), GL_FUZZ_CASE (run only that case index),
GL_FUZZ_DEVICE (cpu / cuda; default cuda when available), GL_FUZZ_REPEAT (run
each case that many times, default 1), GL_FUZZ_POISON (nan / random / zero:
what freed CUDA memory holds before each step; default nan),
GL_RELIABILITY_OUT (a folder: a JSON summary fuzz.json is written there).
A failing case prints its seed and a one-line repro command.
"""

import json
import math
import os
import random
import time
from typing import Dict, List

import pytest
import torch

import grouped_linear
from grouped_linear import fp8, ops
from conftest import TOLERANCE
from fp8_testutil import FORMAT_STEP, FP8_FP32_TOLERANCE, dequantized_operands, formats
from gl_testutil import (assert_close_rel, make_splits, randn, ref_dgrad, ref_forward, ref_wgrad,
                         set_params)

BASE_SEED = int(os.environ.get("GL_FUZZ_SEED", "1234"))
_CUDA = torch.cuda.is_available() and grouped_linear.with_cuda
DEVICE = os.environ.get("GL_FUZZ_DEVICE") or ("cuda" if _CUDA else "cpu")
NUM_CASES = int(os.environ.get("GL_FUZZ_CASES", "1000" if DEVICE == "cuda" else "40"))
ONLY = os.environ.get("GL_FUZZ_CASE")
CASE_INDICES = [int(ONLY)] if ONLY else list(range(NUM_CASES))
# Each case this many times in a row (chasing a failure that comes and goes).
REPEAT = int(os.environ.get("GL_FUZZ_REPEAT", "1"))
CASE_RUNS = [(i, r) for i in CASE_INDICES for r in range(REPEAT)]

# Sizes per device: the CPU engine is a plain reference, so CI's cases are
# smaller; on CUDA the float64 reference on the host bounds the cost.
LIMITS = {"cpu": dict(rows=384, features=160), "cuda": dict(rows=4096, features=640)}
RECIPES = ["none", "delayed", "current", "block"]
# The FP8 GEMMs' accumulation: the recipe's defaults (TE's: fast forward,
# promoting dgrad and wgrad), all fast, or all promoting.
ACCUMULATIONS = ["default", "fast", "split"]

SUMMARY: Dict[int, dict] = {}
_START = time.time()


def case_seed(index: int) -> int:
    return (BASE_SEED * 1_000_003 + index * 7919 + 17) % (2 ** 62)


def repro(index: int) -> str:
    poison = "" if POISON == "nan" else f"GL_FUZZ_POISON={POISON} "
    return (f"{poison}GL_FUZZ_SEED={BASE_SEED} GL_FUZZ_CASE={index} GL_FUZZ_DEVICE={DEVICE} "
            f"python -m pytest tests/python/test_fuzz.py -q")


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, round(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))))


def _features(rng: random.Random, limit: int) -> int:
    kind = rng.random()
    if kind < 0.2:
        return 8 * _log_uniform(rng, 1, limit // 8)
    if kind < 0.4:
        return 16 * _log_uniform(rng, 1, limit // 16)
    if kind < 0.5:
        return 128 * rng.randint(1, max(1, limit // 128))
    if kind < 0.7:  # a few off a multiple of 16 (partial vectors and blocks)
        return max(1, min(limit, 16 * rng.randint(1, limit // 16) + rng.choice([-3, -1, 1, 5])))
    return _log_uniform(rng, 1, limit)


def _splits(rng: random.Random, gen: torch.Generator, rows: int, groups: int, kind: str):
    if kind in ("random_with_zeros", "one_group_all", "uniform_random"):
        return make_splits(gen, rows, groups, kind)
    if kind == "one_huge":  # one group ~90% or more, the rest random (many empty)
        big = rng.randrange(groups)
        rest = rows - int(rows * rng.uniform(0.9, 1.0))
        sizes = [0] * groups
        for _ in range(rest):
            sizes[rng.randrange(groups)] += 1
        sizes[big] += rows - sum(sizes)
        return sizes
    if kind == "mostly_empty":  # a handful of non-empty groups
        live = rng.sample(range(groups), max(1, min(groups, rng.randint(1, 4))))
        sizes = [0] * groups
        for _ in range(rows):
            sizes[rng.choice(live)] += 1
        return sizes
    raise ValueError(kind)


def draw_case(index: int, device: str) -> dict:
    seed = case_seed(index)
    rng = random.Random(seed)
    limits = LIMITS[device]
    r = rng.random()
    groups = 1 if r < 0.1 else (_log_uniform(rng, 2, 16) if r < 0.6 else
                                _log_uniform(rng, 17, 256))
    k, n = _features(rng, limits["features"]), _features(rng, limits["features"])
    rows = 0 if rng.random() < 0.05 else _log_uniform(rng, 1, limits["rows"])
    if groups > 64 and rows and rng.random() < 0.7:  # most groups get rows sometimes
        rows = max(rows, min(limits["rows"], groups * rng.randint(1, 8)))
    kind = rng.choice(["random_with_zeros", "one_group_all", "uniform_random", "one_huge",
                       "mostly_empty"])
    recipe = rng.choice(RECIPES)
    forms = ["list", "host_tensor"] + (["device_int32", "device_int64"] if device == "cuda" else [])
    engines = ops.engine_names(device)
    engine = engines[0] if rng.random() < 0.75 or len(engines) == 1 else rng.choice(engines[1:])
    return dict(index=index, seed=seed, device=device, engine=engine, groups=groups, k=k, n=n,
                rows=rows, kind=kind, dtype=rng.choice(["fp32", "fp16", "bf16"]),
                bias=rng.random() < 0.5, main_grad=rng.random() < 0.3, recipe=recipe,
                fp8_format=rng.choice(["HYBRID", "E4M3"]),
                form=rng.choice(forms), input_3d=rows % 2 == 0 and rng.random() < 0.2,
                input_grad=rng.random() < 0.9,
                # From its own stream, so the draws above stay those of
                # earlier versions (a case index names the same problem).
                accumulation=random.Random(seed ^ 0xACC).choice(ACCUMULATIONS))


DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _recipe(case):
    fmt = fp8.Format[case["fp8_format"]]
    gemms = {}
    if case["accumulation"] != "default":
        params = fp8.MMParams(use_split_accumulator=case["accumulation"] == "split")
        gemms = dict(fp8_gemm_fprop=params, fp8_gemm_dgrad=params, fp8_gemm_wgrad=params)
    if case["recipe"] == "delayed":
        return fp8.DelayedScaling(fp8_format=fmt, amax_history_len=4, **gemms)
    if case["recipe"] == "current":
        return fp8.Float8CurrentScaling(fp8_format=fmt, **gemms)
    if case["recipe"] == "block":
        return fp8.Float8BlockScaling(**gemms)
    return None


def _splits_arg(splits: List[int], form: str, device: str):
    if form == "list":
        return list(splits)
    if form == "host_tensor":
        return torch.tensor(splits, dtype=torch.int64)
    dtype = torch.int32 if form == "device_int32" else torch.int64
    return torch.tensor(splits, dtype=dtype, device=device)


# What _poison_allocator leaves in freed memory: "nan" (default), or, to
# chase a kernel that reads memory nobody wrote (workspaces included),
# "random" bytes (seeded per case) or "zero".
POISON = os.environ.get("GL_FUZZ_POISON", "nan")
if POISON not in ("nan", "random", "zero"):
    raise ValueError(f"GL_FUZZ_POISON={POISON!r}: expected nan, random or zero")


def _poison_allocator(device: str, numel: int, seed: int = 0):
    """Leave NaN in the memory the caching allocator hands out next, so that
    output elements a kernel forgets to write are NaN (rel_err rejects them)."""
    if device != "cuda":
        return

    def block(n: int) -> torch.Tensor:
        if POISON == "random":
            gen = torch.Generator(device=device).manual_seed(seed)
            return torch.randint(0, 256, (4 * n,), dtype=torch.uint8, device=device,
                                 generator=gen)
        return torch.full((n,), 0.0 if POISON == "zero" else float("nan"), device=device)

    # The caching allocator keeps small (<= 1 MiB) and large blocks apart: poison both.
    junk = [block(32768) for _ in range(8)]
    junk.append(block(numel + 4096))
    del junk


def _abs_scale(fn, *args):
    """|| |A| |B| || style magnitude: the reference of the absolute values."""
    return float(torch.linalg.vector_norm(fn(*[None if a is None else a.abs() for a in args])))


def _check_bound(actual, ref, magnitude: float, bound: float, what: str):
    a = actual.detach().to("cpu", torch.float64)
    assert torch.isfinite(a).all(), f"{what}: non-finite values"
    err = float(torch.linalg.vector_norm(a - ref.to(torch.float64)))
    ratio = err / magnitude if magnitude > 0 else (0.0 if err == 0 else math.inf)
    assert ratio <= bound, f"{what}: ||err|| / || |A||B| || = {ratio:.3e} > {bound:.3e}"


def run_case(case: dict):
    device, dtype = case["device"], DTYPES[case["dtype"]]
    groups, k, n, rows = case["groups"], case["k"], case["n"], case["rows"]
    gen = torch.Generator()
    gen.manual_seed(case["seed"])
    rng = random.Random(case["seed"] ^ 0x5EED)
    splits = _splits(rng, gen, rows, groups, case["kind"])
    assert sum(splits) == rows and len(splits) == groups
    recipe = _recipe(case)
    ops.set_engine_override(device, case["engine"])

    module = grouped_linear.GroupedLinear(groups, k, n, bias=case["bias"], params_dtype=dtype,
                                          device=device,
                                          fuse_wgrad_accumulation=case["main_grad"])
    set_params(module, gen)
    x = randn(gen, rows, k, dtype=dtype, device=device)
    dy = randn(gen, rows, n, dtype=dtype, device=device)
    dw_plain, db_plain = ref_wgrad(dy, x, splits)
    if case["main_grad"]:
        rms = float(dw_plain.pow(2).mean().sqrt()) if dw_plain.numel() else 1.0
        module.weight.main_grad = randn(gen, groups, n, k, device=device,
                                        scale=max(rms, 1e-3))
    shape = (2, rows // 2, k) if case["input_3d"] else (rows, k)
    arg = _splits_arg(splits, case["form"], device)

    def step():
        module.zero_grad(set_to_none=True)
        leaf = x.detach().clone().reshape(shape).requires_grad_(case["input_grad"])
        _poison_allocator(device, rows * max(k, n) + groups * n * (k + 1), case["seed"])
        scale_fwd = scale_bwd = None
        if recipe is None:
            out = module(leaf, arg)
        else:
            state = module._fp8_state
            scale_fwd = None if state.scale_fwd is None else state.scale_fwd.detach().clone()
            with grouped_linear.autocast(recipe=recipe):
                out = module(leaf, arg)
            scale_bwd = None if state.scale_bwd is None else state.scale_bwd.detach().clone()
        out.backward(dy.reshape(*shape[:-1], n))
        return out, leaf, scale_fwd, scale_bwd

    if case["recipe"] == "delayed":
        step()  # scales from an amax history of this very data (no saturation)
    before = module.weight.main_grad.detach().clone() if case["main_grad"] else None
    out, leaf, scale_fwd, scale_bwd = step()
    assert out.dtype == dtype and tuple(out.shape) == (*shape[:-1], n)
    out2d = out.reshape(rows, n)
    bias = module.bias if case["bias"] else None
    w = module.weight

    if recipe is None:
        xq, wq, dyq_row, dyq_col, xq_col = x, w, dy, dy, x
    else:
        q = dequantized_operands(recipe, x, w, dy, splits, scale_fwd, scale_bwd)
        xq, wq, dyq_row, dyq_col, xq_col = q["x_row"], q["w"], q["dy_row"], q["dy_col"], q["x_col"]

    # forward (float32 outputs of FP8 products: FP8_FP32_TOLERANCE, the docstring)
    fp8_fp32 = recipe is not None and dtype == torch.float32
    tol = FP8_FP32_TOLERANCE if fp8_fp32 else None
    assert_close_rel(out2d, ref_forward(xq, wq, bias, splits), dtype, "forward", tol=tol)
    # dgrad
    if case["input_grad"]:
        assert leaf.grad is not None and leaf.grad.dtype == dtype
        assert_close_rel(leaf.grad.reshape(rows, k), ref_dgrad(dyq_row, wq, splits), dtype,
                         "dgrad", tol=tol)
    else:
        assert leaf.grad is None
    # wgrad
    dw_ref, _ = ref_wgrad(dyq_col, xq_col, splits)
    if case["main_grad"]:
        assert w.grad is None, "fused accumulation leaves weight.grad unset"
        after = w.main_grad.detach()
        assert after.dtype == torch.float32
        assert_close_rel(after.double().cpu() - before.double().cpu(), dw_ref, torch.float32,
                         "main_grad increment",
                         tol=1e-5 if recipe is None else FP8_FP32_TOLERANCE)
        for g, m in enumerate(splits):
            if m == 0:
                assert torch.equal(after[g], before[g]), f"empty group {g} changed main_grad"
        dw = after.double().cpu() - before.double().cpu()
    else:
        assert w.grad is not None and w.grad.dtype == dtype
        assert_close_rel(w.grad, dw_ref, dtype, "wgrad", tol=tol)
        for g, m in enumerate(splits):
            if m == 0:
                assert torch.count_nonzero(w.grad[g]) == 0, f"wgrad of empty group {g} not zero"
        dw = w.grad
    # bias gradient (from the unquantized dY in every recipe)
    if case["bias"]:
        assert module.bias.grad is not None and module.bias.grad.dtype == dtype
        assert_close_rel(module.bias.grad, db_plain, dtype, "bias grad")
        for g, m in enumerate(splits):
            if m == 0:
                assert torch.count_nonzero(module.bias.grad[g]) == 0, \
                    f"bias grad of empty group {g} not zero"

    if recipe is not None:  # against the unquantized values
        fwd, bwd = formats(recipe)
        u = {f: FORMAT_STEP[f] / 2 for f in (fwd, bwd)}
        slack = 1e-3

        def term(a, b):
            return u[a] + u[b] + u[a] * u[b]

        _check_bound(out2d, ref_forward(x, w, bias, splits),
                     _abs_scale(lambda a, b, c: ref_forward(a, b, c, splits), x, w, bias),
                     term(fwd, fwd) + TOLERANCE[dtype] + slack, "FP8 forward vs unquantized")
        if case["input_grad"]:
            _check_bound(leaf.grad.reshape(rows, k), ref_dgrad(dy, w, splits),
                         _abs_scale(lambda a, b: ref_dgrad(a, b, splits), dy, w),
                         term(bwd, fwd) + TOLERANCE[dtype] + slack, "FP8 dgrad vs unquantized")
        dw_dtype = torch.float32 if case["main_grad"] else dtype
        _check_bound(dw, dw_plain, _abs_scale(lambda a, b: ref_wgrad(a, b, splits)[0], dy, x),
                     term(bwd, fwd) + TOLERANCE[dw_dtype] + slack, "FP8 wgrad vs unquantized")
    return splits


def describe(case: dict) -> str:
    return (f"G={case['groups']} T={case['rows']} K={case['k']} N={case['n']} {case['dtype']} "
            f"recipe={case['recipe']}{'/' + case['fp8_format'] if case['recipe'] in ('delayed', 'current') else ''}"
            f"{'/accumulation=' + case['accumulation'] if case['recipe'] != 'none' else ''} "
            f"splits={case['kind']}/{case['form']} bias={case['bias']} "
            f"main_grad={case['main_grad']} input_grad={case['input_grad']} "
            f"3d={case['input_3d']} engine={case['engine']}")


@pytest.fixture(scope="module", autouse=True)
def _summary_at_the_end():
    yield
    write_summary()


def write_summary():
    """fuzz.json under GL_RELIABILITY_OUT (fuzz_random.json / fuzz_zero.json
    under another GL_FUZZ_POISON), also every 100 cases, so a run cut short by
    a timeout still reports what it did."""
    out = os.environ.get("GL_RELIABILITY_OUT")
    if not out or not SUMMARY:
        return
    records = list(SUMMARY.values())
    count = lambda key: {v: sum(1 for r in records if r[key] == v)  # noqa: E731
                         for v in sorted({r[key] for r in records}, key=str)}
    summary = dict(
        base_seed=BASE_SEED, device=DEVICE, poison=POISON, cases=len(records),
        passed=sum(r["ok"] for r in records), failed=[r for r in records if not r["ok"]],
        seconds=round(time.time() - _START, 1),
        by_recipe=count("recipe"), by_dtype=count("dtype"), by_engine=count("engine"),
        by_accumulation=count("accumulation"),
        by_splits=count("kind"),
        groups_max=max(r["groups"] for r in records),
        k_values=len({r["k"] for r in records}), n_values=len({r["n"] for r in records}),
        k_not_multiple_of_16=sum(r["k"] % 16 != 0 for r in records),
        with_empty_groups=sum(r["empty_groups"] > 0 for r in records),
        main_grad=sum(r["main_grad"] for r in records), bias=sum(r["bias"] for r in records))
    os.makedirs(out, exist_ok=True)
    name = "fuzz.json" if POISON == "nan" else f"fuzz_{POISON}.json"
    with open(os.path.join(out, name), "w") as f:
        json.dump(summary, f, indent=1)


@pytest.mark.skipif(DEVICE == "cuda" and not _CUDA, reason="GL_FUZZ_DEVICE=cuda without CUDA")
@pytest.mark.parametrize("index,run", CASE_RUNS,
                         ids=[f"case{i}" + (f"-run{r}" if REPEAT > 1 else "") for i, r in CASE_RUNS])
def test_fuzz_case(index, run):
    case = draw_case(index, DEVICE)
    text = describe(case)
    print(f"fuzz case {index} (seed {case['seed']}): {text}\nrepro: {repro(index)}")
    record = dict(index=index, seed=case["seed"], ok=False, text=text, repro=repro(index),
                  recipe=case["recipe"], dtype=case["dtype"], engine=case["engine"],
                  accumulation=case["accumulation"],
                  kind=case["kind"], groups=case["groups"], k=case["k"], n=case["n"],
                  main_grad=case["main_grad"], bias=case["bias"], empty_groups=0)
    SUMMARY[(index, run)] = record
    try:
        splits = run_case(case)
        record["empty_groups"] = sum(1 for m in splits if m == 0)
        record["ok"] = True
    except Exception as e:  # noqa: BLE001 (every failure gets the repro line)
        record["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        raise AssertionError(f"fuzz case {index} failed (seed {case['seed']}): {text}\n"
                             f"  {type(e).__name__}: {e}\n  repro: {repro(index)}") from e
    finally:
        ops.set_engine_override(DEVICE, "")
        if len(SUMMARY) % 100 == 0:
            write_summary()


def test_fuzz_draws_are_reproducible_and_varied():
    """The same seed gives the same cases; the drawn set covers what the
    issue asks for (checked on 400 draws of the CPU and CUDA profiles)."""
    for device in ("cpu", "cuda"):
        try:
            engines = ops.engine_names(device)
        except ValueError:
            continue
        if not engines:
            continue
        draws = [draw_case(i, device) for i in range(400)]
        assert draws == [draw_case(i, device) for i in range(400)]
        assert {d["recipe"] for d in draws} == set(RECIPES)
        assert {d["dtype"] for d in draws} == set(DTYPES)
        assert {d["bias"] for d in draws} == {True, False}
        assert {d["main_grad"] for d in draws} == {True, False}
        assert max(d["groups"] for d in draws) > 128 and min(d["groups"] for d in draws) == 1
        assert any(d["k"] % 8 for d in draws) and any(d["n"] % 16 for d in draws)
        assert any(d["k"] % 128 == 0 for d in draws)
        assert any(d["rows"] == 0 for d in draws)
        gen = torch.Generator()
        kinds = set()
        for d in draws[:100]:
            gen.manual_seed(d["seed"])
            s = _splits(random.Random(d["seed"] ^ 0x5EED), gen, d["rows"], d["groups"], d["kind"])
            assert sum(s) == d["rows"] and min(s) >= 0
            if d["groups"] > 1 and d["rows"] > 10 and 0 in s:
                kinds.add("empty")
            if d["rows"] > 10 and max(s) >= 0.9 * d["rows"] and d["groups"] > 2:
                kinds.add("huge")
        assert kinds == {"empty", "huge"}


def test_report_shows_the_random_poison_pass(tmp_path):
    """A GL_FUZZ_POISON=random run writes fuzz_random.json beside fuzz.json;
    scripts/reliability_report.py gives it its own section, failures with a
    repro line that keeps the poison."""
    import importlib.util

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location(
        "reliability_report", os.path.join(root, "scripts", "reliability_report.py"))
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    failed = dict(index=425, seed=7, text="G=209 T=125", error="AssertionError: wgrad",
                  repro=repro(425))
    # Runs since e9cf31f print the poison in the repro line themselves.
    failed_new = dict(index=51, seed=8, text="G=101 T=0", error="AssertionError: wgrad",
                      repro="GL_FUZZ_POISON=random GL_FUZZ_SEED=4321 GL_FUZZ_CASE=51 ...")
    (tmp_path / "fuzz_random.json").write_text(json.dumps(dict(
        base_seed=4321, device="cuda", poison="random", cases=300, passed=298,
        failed=[failed, failed_new], seconds=40.0)))
    text = report.markdown(report.load(str(tmp_path)))
    assert "## Fuzzing with random bytes in freed memory" in text
    assert "**300 cases, 298 passed, 2 failed**" in text
    assert f"`GL_FUZZ_POISON=random {repro(425)}`" in text
    assert "`GL_FUZZ_POISON=random GL_FUZZ_SEED=4321 GL_FUZZ_CASE=51 ...`" in text
    assert text.count("GL_FUZZ_POISON=random GL_FUZZ_POISON") == 0
    assert "_pending: no fuzz results._" in text  # the NaN pass is its own section
