"""Every kernel of the sm90_grouped engine, forced by name, against the float64
reference (skipped without an sm_90 GPU). The engine picks among these per
problem, so each must be right on its own: random group sizes with empty
groups, K and N that are not multiples of the tile, host and device m_splits,
NaN-poisoned outputs, and the CTAs walking the tiles along M and along N."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import grouped_linear
from grouped_linear import ops

from gl_testutil import (assert_close_rel, assert_empty_groups_zero, make_splits, randn,
                         ref_dgrad, ref_forward, ref_wgrad)

ENGINE = "sm90_grouped"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _kernels():
    if not grouped_linear.with_cuda or ENGINE not in ops.engine_names("cuda"):
        return []
    # FP8 kernels take quantized operands: test_sm90_fp8_kernels.py.
    return [k for k in ops.kernel_names("cuda", ENGINE) if "_e4m3_" not in k and "_e5m2_" not in k]


def _sm90_available():
    return (torch.cuda.is_available() and grouped_linear.with_cuda
            and torch.cuda.get_device_capability() == (9, 0))


KERNELS = _kernels() or [pytest.param("none", marks=pytest.mark.skip(
    reason=f"grouped_linear was built without the {ENGINE} engine"))]

# (groups, rows, K, N): K and N multiples of 8 (what the kernels take) but not
# of any tile; group counts around one wave of CTAs and beyond.
CASES = [(7, 300, 136, 200), (40, 1000, 72, 264), (3, 517, 520, 64)]


@pytest.fixture
def kernel(request):
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    name = request.param
    ops.set_kernel_override("cuda", ENGINE, name)
    request.addfinalizer(lambda: ops.set_kernel_override("cuda", ENGINE, ""))
    return name


def pytest_generate_tests(metafunc):
    if "kernel" in metafunc.fixturenames:
        metafunc.parametrize("kernel", KERNELS, indirect=True)


def _nan(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


@pytest.mark.parametrize("device_splits", [False, True], ids=["host_splits", "device_splits"])
@pytest.mark.parametrize("case", CASES, ids=[f"G{g}-T{t}-K{k}-N{n}" for g, t, k, n in CASES])
def test_kernel_matches_reference(kernel, case, device_splits, tile_order, gen):
    role = kernel.split("_")[0]
    dtype = DTYPES[kernel.split("_")[1]]
    groups, rows, k, n = case
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    m_splits = torch.tensor(splits, device="cuda") if device_splits else splits
    x = randn(gen, rows, k, dtype=dtype, device="cuda")
    w = randn(gen, groups, n, k, dtype=dtype, device="cuda", scale=k ** -0.5)
    dy = randn(gen, rows, n, dtype=dtype, device="cuda")
    if role == "forward":
        # With and without bias: the epilogue adds each group's bias row
        # (a null bias array adds nothing).
        bias = randn(gen, groups, n, dtype=dtype, device="cuda")
        for b in (None, bias):
            out = _nan((rows, n), dtype)
            ops.forward(x, w, b, m_splits, out=out, engine=ENGINE)
            assert not torch.isnan(out).any(), f"{kernel} left elements of out unwritten"
            assert_close_rel(out, ref_forward(x, w, b, splits), dtype, kernel)
    elif role == "dgrad":
        out = _nan((rows, k), dtype)
        ops.dgrad(dy, w, m_splits, out=out, engine=ENGINE)
        assert not torch.isnan(out).any(), f"{kernel} left elements of out unwritten"
        assert_close_rel(out, ref_dgrad(dy, w, splits), dtype, kernel)
    elif "to_fp32" in kernel:
        # The main_grad form: float32 accumulation into a buffer with prior values.
        prior = randn(gen, groups, n, k, device="cuda")
        buffer = prior.clone()
        ops.wgrad(dy, x, m_splits, grad_weight=buffer, accumulate=True, engine=ENGINE)
        dw_ref, _ = ref_wgrad(dy, x, splits)
        assert_close_rel(buffer, prior.to("cpu", torch.float64) + dw_ref, torch.float32, kernel)
        for g, m in enumerate(splits):
            if m == 0:
                assert torch.equal(buffer[g], prior[g]), f"{kernel}: empty group {g} changed"
    else:
        out = _nan((groups, n, k), dtype)
        ops.wgrad(dy, x, m_splits, grad_weight=out, engine=ENGINE)
        assert not torch.isnan(out).any(), f"{kernel} left elements of grad_weight unwritten"
        dw_ref, _ = ref_wgrad(dy, x, splits)
        assert_close_rel(out, dw_ref, dtype, kernel)
        assert_empty_groups_zero(out, splits, kernel)


def test_unknown_kernel_name_is_an_error():
    if not _kernels():
        pytest.skip(f"grouped_linear was built without the {ENGINE} engine")
    with pytest.raises(ValueError, match="kernel: got 'no_such_kernel', expected one of"):
        ops.set_kernel_override("cuda", ENGINE, "no_such_kernel")
    ops.set_kernel_override("cuda", ENGINE, "")


def test_engines_without_kernels_reject_names():
    assert ops.kernel_names("cpu", "cpu_reference") == []
    with pytest.raises(ValueError, match="has no named kernels"):
        ops.set_kernel_override("cpu", "cpu_reference", "anything")
    ops.set_kernel_override("cpu", "cpu_reference", "")  # clearing is always allowed


def test_tile_orders_are_checked():
    """Only the sm90 engine has a tile scheduler; it takes the three orders
    by name and refuses others, keeping the one it had."""
    with pytest.raises(ValueError, match="tile order: got 'along_n'.*has no tile scheduler"):
        ops.set_tile_order("cpu", "cpu_reference", "along_n")
    ops.set_tile_order("cpu", "cpu_reference", "")  # clearing is always allowed
    if not _kernels():
        pytest.skip(f"grouped_linear was built without the {ENGINE} engine")
    try:
        for order in ("along_m", "along_n", "shorter_side", ""):
            ops.set_tile_order("cuda", ENGINE, order)
        with pytest.raises(ValueError, match="tile order: got 'diagonal', expected '' "):
            ops.set_tile_order("cuda", ENGINE, "diagonal")
    finally:
        ops.set_tile_order("cuda", ENGINE, "")


def test_l2_promotions_are_checked():
    """Only engines whose kernels load through tensor maps take an L2
    promotion; the sm90 engine takes '128B' and '256B' and refuses others,
    keeping the one it had."""
    with pytest.raises(ValueError, match="L2 promotion: got '256B'.*loads no operands through"):
        ops.set_l2_promotion("cpu", "cpu_reference", "256B")
    ops.set_l2_promotion("cpu", "cpu_reference", "")  # clearing is always allowed
    if not _kernels():
        pytest.skip(f"grouped_linear was built without the {ENGINE} engine")
    try:
        for promotion in ("128B", "256B", ""):
            ops.set_l2_promotion("cuda", ENGINE, promotion)
        with pytest.raises(ValueError, match="L2 promotion: got '512B', expected '' "):
            ops.set_l2_promotion("cuda", ENGINE, "512B")
    finally:
        ops.set_l2_promotion("cuda", ENGINE, "")


def _run_role(kernel, case, gen):
    """One call of the kernel's role on fresh random operands; its output."""
    role = kernel.split("_")[0]
    dtype = DTYPES[kernel.split("_")[1]]
    groups, rows, k, n = case
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    x = randn(gen, rows, k, dtype=dtype, device="cuda")
    w = randn(gen, groups, n, k, dtype=dtype, device="cuda", scale=k ** -0.5)
    dy = randn(gen, rows, n, dtype=dtype, device="cuda")
    if role == "forward":
        out = _nan((rows, n), dtype)
        ops.forward(x, w, randn(gen, groups, n, dtype=dtype, device="cuda"), splits, out=out,
                    engine=ENGINE)
    elif role == "dgrad":
        out = _nan((rows, k), dtype)
        ops.dgrad(dy, w, splits, out=out, engine=ENGINE)
    elif "to_fp32" in kernel:
        out = randn(gen, groups, n, k, device="cuda")
        ops.wgrad(dy, x, splits, grad_weight=out, accumulate=True, engine=ENGINE)
    else:
        out = _nan((groups, n, k), dtype)
        ops.wgrad(dy, x, splits, grad_weight=out, engine=ENGINE)
    return out


@pytest.mark.parametrize("case", CASES[1:], ids=[f"G{g}-T{t}-K{k}-N{n}" for g, t, k, n in CASES[1:]])
def test_kernel_gives_the_same_bits_under_each_l2_promotion(kernel, case):
    """The L2 promotion changes how L2 fetches the operands, never what a
    kernel computes: under '256B' each kernel writes the bits it writes
    under the default (which the test above checks against float64)."""
    outs = {}
    try:
        for promotion in ("128B", "256B"):
            ops.set_l2_promotion("cuda", ENGINE, promotion)
            outs[promotion] = _run_role(kernel, case, torch.Generator().manual_seed(7))
    finally:
        ops.set_l2_promotion("cuda", ENGINE, "")
    assert not torch.isnan(outs["256B"]).any(), f"{kernel} left elements unwritten under 256B"
    assert torch.equal(outs["128B"], outs["256B"]), f"{kernel}: results differ under 256B"


# Few output tiles over long reductions: the engine splits each group's rows
# into pieces (sm90/split_reduction.h: here 4, 2 and 2 pieces), a float32
# wgrad kernel writes each piece's gradient and one pass sums them into the
# output's dtype (sum_partials.cu); an empty group in the third case.
SPLIT_CASES = [(1, 8192, 512, 256), (2, 12000, 136, 200), (3, 16000, 264, 72)]


@pytest.mark.skipif(not _sm90_available(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize("dtype_name", sorted(DTYPES))
@pytest.mark.parametrize("case", SPLIT_CASES, ids=[f"G{g}-T{t}-K{k}-N{n}"
                                                   for g, t, k, n in SPLIT_CASES])
def test_wgrad_split_along_its_reduction_matches_reference(case, dtype_name, gen):
    dtype = DTYPES[dtype_name]
    groups, rows, k, n = case
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    x = randn(gen, rows, k, dtype=dtype, device="cuda")
    dy = randn(gen, rows, n, dtype=dtype, device="cuda")
    dw_ref, _ = ref_wgrad(dy, x, splits)
    what = f"split wgrad G{groups} T{rows} {dtype_name}"
    out = _nan((groups, n, k), dtype)
    ops.wgrad(dy, x, splits, grad_weight=out, engine=ENGINE)
    assert not torch.isnan(out).any(), f"{what}: left elements of grad_weight unwritten"
    assert_close_rel(out, dw_ref, dtype, what)
    assert_empty_groups_zero(out, splits, what)
    # The main_grad form: float32 accumulation into a buffer with prior values.
    prior = randn(gen, groups, n, k, device="cuda")
    buffer = prior.clone()
    ops.wgrad(dy, x, splits, grad_weight=buffer, accumulate=True, engine=ENGINE)
    assert_close_rel(buffer, prior.to("cpu", torch.float64) + dw_ref, torch.float32,
                     f"{what}, accumulated")
    for g, m in enumerate(splits):
        if m == 0:
            assert torch.equal(buffer[g], prior[g]), f"{what}: empty group {g} changed"


_SPLIT_LOG_SCRIPT = textwrap.dedent("""
    import torch
    from grouped_linear import ops
    x = torch.randn(8192, 512, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(8192, 256, device="cuda", dtype=torch.bfloat16)
    ops.wgrad(dy, x, [8192], engine="sm90_grouped")
    ops.wgrad(dy[:4096], x[:4096], [4096], engine="sm90_grouped")
    ops.wgrad(dy[:4095], x[:4095], [4095], engine="sm90_grouped")
    torch.cuda.synchronize()
""")


@pytest.mark.skipif(not _sm90_available(), reason="needs an sm_90 GPU")
def test_wgrad_splits_only_where_the_rule_says():
    """The log names each split (GROUPED_LINEAR_LOG_LEVEL=info): 8192 rows
    onto a 256 x 512 weight in 4 pieces, 4096 in 2, 4095 not at all."""
    env = dict(os.environ, GROUPED_LINEAR_LOG_LEVEL="info")
    proc = subprocess.run([sys.executable, "-c", _SPLIT_LOG_SCRIPT], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    splits = [line for line in proc.stderr.splitlines() if "reduction split in" in line]
    assert len(splits) == 2, proc.stderr
    assert "split in 4 pieces" in splits[0] and "split in 2 pieces" in splits[1], splits
    plain = [line for line in proc.stderr.splitlines() if "] wgrad: sm90_grouped kernel" in line]
    assert len(plain) == 1, proc.stderr


@pytest.mark.skipif(not _sm90_available() or not _kernels(), reason="needs an sm_90 GPU and the "
                    f"{ENGINE} engine")
@pytest.mark.parametrize("device_splits", [False, True], ids=["host_splits", "device_splits"])
@pytest.mark.parametrize("groups", [1021, 1024])
def test_group_counts_up_to_the_limit(groups, device_splits, gen):
    """Each CTA stages every group's size in shared memory before its scan
    (four host sizes a read): the most groups the engine takes, a count that
    is not a multiple of four, mostly empty groups, every role."""
    rows, k, n, dtype = 2 * groups, 32, 40, torch.bfloat16
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    assert splits.count(0) > groups // 4
    m_splits = torch.tensor(splits, device="cuda") if device_splits else splits
    x = randn(gen, rows, k, dtype=dtype, device="cuda")
    w = randn(gen, groups, n, k, dtype=dtype, device="cuda", scale=k ** -0.5)
    dy = randn(gen, rows, n, dtype=dtype, device="cuda")
    out = _nan((rows, n), dtype)
    ops.forward(x, w, None, m_splits, out=out, engine=ENGINE)
    assert not torch.isnan(out).any(), "forward left elements of out unwritten"
    assert_close_rel(out, ref_forward(x, w, None, splits), dtype, "forward")
    dx = _nan((rows, k), dtype)
    ops.dgrad(dy, w, m_splits, out=dx, engine=ENGINE)
    assert not torch.isnan(dx).any(), "dgrad left elements of out unwritten"
    assert_close_rel(dx, ref_dgrad(dy, w, splits), dtype, "dgrad")
    dw = _nan((groups, n, k), dtype)
    ops.wgrad(dy, x, m_splits, grad_weight=dw, engine=ENGINE)
    assert not torch.isnan(dw).any(), "wgrad left elements of grad_weight unwritten"
    dw_ref, _ = ref_wgrad(dy, x, splits)
    assert_close_rel(dw, dw_ref, dtype, "wgrad")
    assert_empty_groups_zero(dw, splits, "wgrad")
