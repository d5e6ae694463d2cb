"""Every FP8 kernel of the sm90_grouped engine, forced by name, against a
float64 reference computed from the same FP8 codes and scales (skipped
without an sm_90 GPU). The operands are built here in plain torch, in the
layouts of core/fp8/fp8_tensor.h (row-wise, each W_g transposed, and the
group-aligned column-wise copies), independently of the quantize kernels.
Per-tensor kernels get per-tensor scales, "_block_" kernels blockwise ones
(Float8BlockScaling: 1x128 blocks of activations and gradients, 128x128 of
weights). The CTAs walk the tiles along M and along N (tile_order). Each
kernel writes the output its name gives (bf16, fp16, fp32; "to_fp32": the
wgrads that also accumulate into main_grad) into a NaN-poisoned buffer with
NaN guard rows (groups, for wgrad) before and after it, which must stay NaN.

Tolerance: products of FP8 codes are exact in fp32 and the kernels sum in
fp32 (CUTLASS's FP8 mainloop promotes its tensor-core partial sums into fp32
registers every few k-blocks), so the error is the output's rounding: the
bf16 and fp16 tolerances for those outputs. For fp32 outputs the bound is
3e-4: inside one 128-deep k-block (4 wgmma instructions, before each
promotion into fp32 registers) the tensor core adds FP8 products at a
reduced accumulator width (about 13 mantissa bits), so the error is about
2^-13 per k-block rather than fp32's 2^-24; measured up to 1.0e-4 on the
H200 for reductions of 200 to 500 rows. The block-scaled kernels scale each
128-deep k-block's partial sums (accumulated by the tensor core in that
reduced width) and add them in fp32, so the same bounds hold.

The "_fast" kernels (a recipe's use_split_accumulator=False) never promote:
the whole reduction runs in the tensor core's accumulator, whose error grows
with the reduction depth (about 2^-14 of the running sum per 32-deep step).
For bf16 outputs they are held to the same bf16 tolerance (norm-wise, as
everywhere here), also over a reduction of 8192, the longest at which the
benchmark shapes run them (test_fast_accumulation_over_long_reductions)."""

import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import grouped_linear
from grouped_linear import ops

from gl_testutil import assert_close_rel, make_splits

ENGINE = "sm90_grouped"
FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
GROUP_ALIGN = grouped_linear._C.fp8.GROUP_ALIGN  # group starts of column-wise copies
OUT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
              "to": torch.float32}
FP32_OUT_TOLERANCE = 3e-4  # the tensor core's accumulation width within a k-block (above)
GUARD = 2  # NaN rows (wgrad: groups) on each side of an output


def out_dtype(kernel):
    """The output dtype a kernel's name gives: role_format_OUT_..."""
    return OUT_DTYPES[kernel.split("_")[2]]


def out_tolerance(dtype):
    return FP32_OUT_TOLERANCE if dtype == torch.float32 else None


def guarded_output(shape, dtype):
    """A NaN-filled output of `shape` inside a buffer with GUARD NaN slices
    before and after it along dim 0 (16-byte aligned for every shape here);
    returns (out, guards_intact)."""
    buf = torch.full((shape[0] + 2 * GUARD, *shape[1:]), float("nan"), dtype=dtype, device="cuda")
    out = buf[GUARD:GUARD + shape[0]]
    assert out.is_contiguous() and out.data_ptr() % 16 == 0
    return out, lambda: bool(buf[:GUARD].isnan().all() and buf[GUARD + shape[0]:].isnan().all())


def check_output(kernel, out, guards_intact, ref, what=""):
    dtype = out.dtype
    assert_close_rel(out, ref, dtype, f"{kernel}{what}", tol=out_tolerance(dtype))
    assert guards_intact(), f"{kernel}{what}: wrote outside its output"


def _fp8_kernels(block_scaled):
    if not grouped_linear.with_cuda or ENGINE not in ops.engine_names("cuda"):
        return []
    return [k for k in ops.kernel_names("cuda", ENGINE)
            if ("_e4m3_" in k or "_e5m2_" in k) and ("_block_" in k) == block_scaled]


def _sm90_available():
    return (torch.cuda.is_available() and grouped_linear.with_cuda
            and torch.cuda.get_device_capability() == (9, 0))


_NONE = [pytest.param("none", marks=pytest.mark.skip(
    reason=f"grouped_linear was built without the {ENGINE} engine"))]
KERNELS = _fp8_kernels(False) or _NONE
BLOCK_KERNELS = _fp8_kernels(True) or _NONE

# (groups, rows, K, N): K and N multiples of 16 (what FP8 rows need) but not
# of any tile; empty groups and groups of odd sizes.
CASES = [(7, 300, 144, 208), (40, 1000, 80, 272), (3, 517, 528, 64)]


def _forced(request):
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    ops.set_kernel_override("cuda", ENGINE, request.param)
    request.addfinalizer(lambda: ops.set_kernel_override("cuda", ENGINE, ""))
    return request.param


@pytest.fixture
def kernel(request):
    return _forced(request)


@pytest.fixture
def block_kernel(request):
    return _forced(request)


@pytest.fixture
def fast_kernel(request):
    return _forced(request)


def pytest_generate_tests(metafunc):
    if "kernel" in metafunc.fixturenames:
        metafunc.parametrize("kernel", KERNELS, indirect=True)
    if "block_kernel" in metafunc.fixturenames:
        metafunc.parametrize("block_kernel", BLOCK_KERNELS, indirect=True)
    if "fast_kernel" in metafunc.fixturenames:
        metafunc.parametrize("fast_kernel", [k for k in KERNELS if "_fast" in k] or _NONE,
                             indirect=True)


def codes(gen, shape, fmt):
    """Random FP8 codes (never all zero), saturating below the format's max."""
    v = torch.randn(*shape, generator=gen) * (FP8_MAX[fmt] / 8)
    return v.clamp(-FP8_MAX[fmt], FP8_MAX[fmt]).to(FORMATS[fmt]).to("cuda")


def scales(gen, count):
    return (torch.rand(count, generator=gen) * 0.01 + 1e-3).to("cuda")


def columnwise(a, splits, fill=0.0):
    """[T, C] -> [C, P]: group g's rows as columns from sum_{j<g} roundup(m_j,
    GROUP_ALIGN), `fill` (zeros, as the quantizer writes) between."""
    groups, rows = len(splits), a.shape[0]
    width = -(-(rows + (GROUP_ALIGN - 1) * groups) // GROUP_ALIGN) * GROUP_ALIGN
    out = torch.full((a.shape[1], width), fill, dtype=torch.float32, device=a.device)
    row = col = 0
    for m in splits:
        out[:, col:col + m] = a[row:row + m].float().T
        row += m
        col += -(-m // GROUP_ALIGN) * GROUP_ALIGN
    return out.to(a.dtype)


def f64(t, scale):
    return t.to("cpu", torch.float64) * scale.to("cpu", torch.float64)


@pytest.mark.parametrize("device_splits", [False, True], ids=["host_splits", "device_splits"])
@pytest.mark.parametrize("case", CASES, ids=[f"G{g}-T{t}-K{k}-N{n}" for g, t, k, n in CASES])
def test_fp8_kernel_matches_reference(kernel, case, device_splits, tile_order, gen):
    role, a_fmt = kernel.split("_")[:2]
    groups, rows, k, n = case
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    m_splits = torch.tensor(splits, device="cuda") if device_splits else splits
    dtype = out_dtype(kernel)
    if role == "forward":
        x, w = codes(gen, (rows, k), "e4m3"), codes(gen, (groups, n, k), "e4m3")
        sx, sw = scales(gen, 1), scales(gen, groups)
        ref = torch.empty(rows, n, dtype=torch.float64)
        row = 0
        for g, m in enumerate(splits):
            ref[row:row + m] = f64(x[row:row + m], sx) @ f64(w[g], sw[g]).T
            row += m
        check_forward(kernel, ref, splits, gen,
                      lambda bias, out: ops.fp8_forward(x, sx, w, sw, bias, m_splits, out=out,
                                                        engine=ENGINE))
    elif role == "dgrad":
        dy, w = codes(gen, (rows, n), a_fmt), codes(gen, (groups, n, k), "e4m3")
        sdy, sw = scales(gen, 1), scales(gen, groups)
        w_t = w.float().transpose(1, 2).contiguous().to(w.dtype)
        ref = torch.empty(rows, k, dtype=torch.float64)
        row = 0
        for g, m in enumerate(splits):
            ref[row:row + m] = f64(dy[row:row + m], sdy) @ f64(w[g], sw[g])
            row += m
        out, guards_intact = guarded_output((rows, k), dtype)
        ops.fp8_dgrad(dy, sdy, w_t, sw, m_splits, out=out, engine=ENGINE)
        check_output(kernel, out, guards_intact, ref)
    else:
        dy, x = codes(gen, (rows, n), a_fmt), codes(gen, (rows, k), "e4m3")
        sdy, sx = scales(gen, 1), scales(gen, 1)
        ref = torch.zeros(groups, n, k, dtype=torch.float64)
        row = 0
        for g, m in enumerate(splits):
            ref[g] = f64(dy[row:row + m], sdy).T @ f64(x[row:row + m], sx)
            row += m
        dy_t, x_t = columnwise(dy, splits), columnwise(x, splits)
        check_wgrad(kernel, lambda **out: ops.fp8_wgrad(dy_t, sdy, x_t, sx, m_splits, rows, **out,
                                                        engine=ENGINE), ref, splits, gen)


# Many groups of one or two tiles each: a CTA's consecutive tiles are in
# different groups, so every tile rewrites the store's tensor map while the
# previous tile's stores may still be in flight (the "_overlap" kernels keep
# two, overlapped_switch_epilogue.cuh). 128 groups, most of them switching
# at every tile of the 132 CTAs; random sizes with empty groups.
SWITCH_CASES = [(128, 128, 256, 6000), (96, 256, 128, 9000)]


@pytest.mark.parametrize("case", SWITCH_CASES, ids=[f"G{g}-N{n}-K{k}-T{t}"
                                                    for g, n, k, t in SWITCH_CASES])
def test_wgrad_switching_group_at_every_tile(kernel, case, gen):
    if not kernel.startswith("wgrad_"):
        pytest.skip("a wgrad case")
    groups, n, k, rows = case
    a_fmt = kernel.split("_")[1]
    for _ in range(3):  # fresh inputs and sizes each time
        splits = make_splits(gen, rows, groups, "random_with_zeros")
        dy, x = codes(gen, (rows, n), a_fmt), codes(gen, (rows, k), "e4m3")
        sdy, sx = scales(gen, 1), scales(gen, 1)
        ref = torch.stack([f64(dyg, sdy).T @ f64(xg, sx)
                           for dyg, xg in zip(dy.split(splits), x.split(splits))])
        dy_t, x_t = columnwise(dy, splits), columnwise(x, splits)
        check_wgrad(kernel, lambda **out: ops.fp8_wgrad(dy_t, sdy, x_t, sx, splits, rows, **out,
                                                        engine=ENGINE), ref, splits, gen)


def check_forward(kernel, ref, splits, gen, forward):
    """Runs `forward(bias, out)` without and with a bias (in the output's
    dtype) into a guarded NaN-poisoned output, against the float64 `ref`
    [T, N] of the product alone."""
    dtype = out_dtype(kernel)
    groups, (rows, n) = len(splits), ref.shape
    bias = torch.randn(groups, n, generator=gen).to("cuda", dtype)
    with_bias = ref.clone()
    row = 0
    for g, m in enumerate(splits):
        with_bias[row:row + m] += bias[g].to("cpu", torch.float64)
        row += m
    for b, expected, what in ((None, ref, " without bias"), (bias, with_bias, " with bias")):
        out, guards_intact = guarded_output((rows, n), dtype)
        forward(b, out)
        check_output(kernel, out, guards_intact, expected, what)


def check_wgrad(kernel, wgrad, ref, splits, gen):
    """Runs `wgrad(out=..., accumulate=...)` as the kernel's output allows and
    checks it against the float64 `ref` [G, N, K]: every kernel writes a
    guarded NaN-poisoned output (empty groups exactly zero); the "to_fp32"
    ones also accumulate into a random main_grad (empty groups leave it
    unchanged)."""
    out, guards_intact = guarded_output(tuple(ref.shape), out_dtype(kernel))
    wgrad(out=out, accumulate=False)
    check_output(kernel, out, guards_intact, ref)
    for g, m in enumerate(splits):
        if m == 0:
            assert torch.count_nonzero(out[g]) == 0, f"{kernel}: empty group {g} not zero"
    if "to_fp32" in kernel:
        prior = torch.randn(*ref.shape, generator=gen).to("cuda")
        buffer = prior.clone()
        wgrad(out=buffer, accumulate=True)
        assert_close_rel(buffer, prior.to("cpu", torch.float64) + ref, torch.float32, kernel,
                         tol=FP32_OUT_TOLERANCE)
        for g, m in enumerate(splits):
            if m == 0:
                assert torch.equal(buffer[g], prior[g]), f"{kernel}: empty group {g} changed"


OUTPUTS = [torch.bfloat16, torch.float16, torch.float32]
OUTPUT_IDS = ["bf16", "fp16", "fp32"]


@pytest.mark.parametrize("dtype", OUTPUTS, ids=OUTPUT_IDS)
@pytest.mark.parametrize("role", ["forward", "dgrad", "wgrad"])
def test_fp8_kernels_agree_with_emulation(role, dtype, gen):
    """The engine's FP8 kernels (its automatic choice for each output dtype)
    and the dequantize-then-float32 emulation give the same products (both
    within the output's rounding of the float64 values)."""
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    groups, rows, k, n = 5, 333, 96, 160
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    if role == "forward":
        x, w, sx, sw = codes(gen, (rows, k), "e4m3"), codes(gen, (groups, n, k), "e4m3"), \
            scales(gen, 1), scales(gen, groups)
        run = lambda engine: ops.fp8_forward(x, sx, w, sw, None, splits, out_dtype=dtype,
                                             engine=engine)
    elif role == "dgrad":
        dy, w, s1, sw = codes(gen, (rows, n), "e5m2"), codes(gen, (groups, n, k), "e4m3"), \
            scales(gen, 1), scales(gen, groups)
        w_t = w.float().transpose(1, 2).contiguous().to(w.dtype)
        run = lambda engine: ops.fp8_dgrad(dy, s1, w_t, sw, splits, out_dtype=dtype,
                                           engine=engine)
    else:
        dy, x, s1, s2 = codes(gen, (rows, n), "e5m2"), codes(gen, (rows, k), "e4m3"), \
            scales(gen, 1), scales(gen, 1)
        dy_t, x_t = columnwise(dy, splits), columnwise(x, splits)
        run = lambda engine: ops.fp8_wgrad(dy_t, s1, x_t, s2, splits, rows, out_dtype=dtype,
                                           engine=engine)
    kernels, emulated = run(ENGINE), run("emulate")
    assert kernels.dtype == dtype
    assert_close_rel(kernels, emulated.double(), dtype, f"{role}: kernels vs emulation",
                     tol=out_tolerance(dtype))


def test_fast_accumulation_over_long_reductions(fast_kernel, gen):
    """A reduction 8192 deep (K for the forward, N for dgrad, a group's rows
    for wgrad) through a fast-accumulation kernel, against float64, beside
    the promoting kernel of the same role on the same operands."""
    kernel = fast_kernel
    role, a_fmt = kernel.split("_")[:2]
    depth, rows, width = 8192, 384, 256
    splits = [rows - 128, 0, 128] if role != "wgrad" else [depth, 0, 128]
    rows, groups = sum(splits), len(splits)
    if role == "forward":
        x, w = codes(gen, (rows, depth), "e4m3"), codes(gen, (groups, width, depth), "e4m3")
        sx, sw = scales(gen, 1), scales(gen, groups)
        ref = torch.cat([f64(xg, sx) @ f64(w[g], sw[g]).T
                         for g, xg in enumerate(x.split(splits))])
        run = lambda split: ops.fp8_forward(x, sx, w, sw, None, splits, engine=ENGINE,
                                            split_accumulator=split)
    elif role == "dgrad":
        dy, w = codes(gen, (rows, depth), a_fmt), codes(gen, (groups, depth, width), "e4m3")
        sdy, sw = scales(gen, 1), scales(gen, groups)
        w_t = w.float().transpose(1, 2).contiguous().to(w.dtype)
        ref = torch.cat([f64(dyg, sdy) @ f64(w[g], sw[g]) for g, dyg in enumerate(dy.split(splits))])
        run = lambda split: ops.fp8_dgrad(dy, sdy, w_t, sw, splits, engine=ENGINE,
                                          split_accumulator=split)
    else:
        dy, x = codes(gen, (rows, width), a_fmt), codes(gen, (rows, width), "e4m3")
        sdy, sx = scales(gen, 1), scales(gen, 1)
        ref = torch.stack([f64(dyg, sdy).T @ f64(xg, sx)
                           for dyg, xg in zip(dy.split(splits), x.split(splits))])
        dy_t, x_t = columnwise(dy, splits), columnwise(x, splits)
        run = lambda split: ops.fp8_wgrad(dy_t, sdy, x_t, sx, splits, rows, engine=ENGINE,
                                          split_accumulator=split)
    fast = run(False)   # the forced kernel
    ops.set_kernel_override("cuda", ENGINE, "")
    promoted = run(True)
    assert_close_rel(fast, ref, torch.bfloat16, kernel)
    assert_close_rel(promoted, ref, torch.bfloat16, f"{role}: the promoting kernel")


def test_kernels_without_a_source_refuse_to_accumulate(gen):
    """"_widestore" wgrads read no C operand: asked to accumulate into a
    buffer they raise (rather than overwrite it), and the engine works after.
    (The wide-store forward and dgrad candidates have no accumulating call.)
    Each kernel is called with its own gradient format and output dtype: an
    override applies only to calls it matches (a bf16 buffer would run the
    automatic choice past an fp16 kernel's override, and accumulate)."""
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    kernels = [k for k in _fp8_kernels(False)
               if k.startswith("wgrad_") and "_widestore" in k]
    if not kernels:
        pytest.skip("no kernel without a source in this build (GL_SM90_TUNING)")
    splits, n, k = [40, 0, 24], 32, 48
    x = codes(gen, (64, k), "e4m3")
    sx, x_t = scales(gen, 1), columnwise(x, splits)
    for kernel in kernels:
        grad_format = "e5m2" if "_e5m2_" in kernel else "e4m3"
        out_dtype = torch.float16 if "_fp16_" in kernel else torch.bfloat16
        dy, sdy = codes(gen, (64, n), grad_format), scales(gen, 1)
        dy_t = columnwise(dy, splits)
        ref = torch.stack([f64(dyg, sdy).T @ f64(xg, sx)
                           for dyg, xg in zip(dy.split(splits), x.split(splits))])
        buffer = torch.ones(3, n, k, dtype=out_dtype, device="cuda")
        ops.set_kernel_override("cuda", ENGINE, kernel)
        try:
            with pytest.raises(ValueError, match=r"reads no C operand \(beta = 0 only\)"):
                ops.fp8_wgrad(dy_t, sdy, x_t, sx, splits, 64, out=buffer, accumulate=True,
                              engine=ENGINE, split_accumulator=False)
            out = ops.fp8_wgrad(dy_t, sdy, x_t, sx, splits, 64, out_dtype=out_dtype,
                                engine=ENGINE, split_accumulator=False)
        finally:
            ops.set_kernel_override("cuda", ENGINE, "")
        assert out.dtype == out_dtype, kernel
        assert_close_rel(out, ref, out_dtype, kernel)
        assert torch.equal(buffer, torch.ones_like(buffer)), f"{kernel}: the refused call wrote out"
        if out_dtype == torch.bfloat16:  # (the E5M2 wgrads into fp16 include none that reads C)
            ops.fp8_wgrad(dy_t, sdy, x_t, sx, splits, 64, out=buffer, accumulate=True,
                          engine=ENGINE)
            assert_close_rel(buffer, ref + 1.0, out_dtype, f"{kernel}: accumulate after the error")


@pytest.mark.parametrize("split_accumulator", [True, False], ids=["split", "fast"])
def test_automatic_choice_accumulates_when_asked(split_accumulator, gen):
    """Without an override, wgrad into a bf16 buffer with accumulate=True adds
    to it whatever the accumulation: the wide-store kernel, preferred for
    fast accumulation, cannot read C, so the table must pass over it."""
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    splits, n, k = [200, 0, 56, 300], 256, 384
    rows = sum(splits)
    dy, x = codes(gen, (rows, n), "e5m2"), codes(gen, (rows, k), "e4m3")
    sdy, sx = scales(gen, 1), scales(gen, 1)
    dy_t, x_t = columnwise(dy, splits), columnwise(x, splits)
    ref = torch.stack([f64(dyg, sdy).T @ f64(xg, sx)
                       for dyg, xg in zip(dy.split(splits), x.split(splits))])
    prior = torch.randn(len(splits), n, k, generator=gen).to("cuda", torch.bfloat16)
    buffer = prior.clone()
    ops.fp8_wgrad(dy_t, sdy, x_t, sx, splits, rows, out=buffer, accumulate=True,
                  split_accumulator=split_accumulator)
    assert_close_rel(buffer, prior.to("cpu", torch.float64) + ref, torch.bfloat16, "accumulated")
    assert torch.equal(buffer[1], prior[1]), "the empty group's slice changed"
    fresh = ops.fp8_wgrad(dy_t, sdy, x_t, sx, splits, rows, split_accumulator=split_accumulator)
    assert_close_rel(fresh, ref, torch.bfloat16, "written")


# ---- blockwise scales (Float8BlockScaling) ----------------------------------

BLOCK = 128


def cdiv(a, b):
    return -(-a // b)


def block_scales(gen, shape):
    """Positive scale_inv per block, spread over 1.5 decades so that a block
    read at the wrong index shows."""
    return (torch.exp(torch.rand(*shape, generator=gen) * 4 - 2) * 4e-3).to("cuda")


def row_block_scales(gen, rows, channels):
    """A row-wise copy's 1x128 block scales, block-major (core/fp8/fp8_tensor.h):
    [ceil(C/128), T]."""
    return block_scales(gen, (cdiv(channels, BLOCK), rows))


def column_block_scales(gen, channels, splits):
    """[ceil(T/128) + G, C], block-major: group g's 1x128 blocks (restarting
    at its first row) from block sum_{j<g} ceil(m_j/128); the blocks past the
    last group's are never read, so they hold NaN."""
    used = sum(cdiv(m, BLOCK) for m in splits)
    out = torch.full((cdiv(sum(splits), BLOCK) + len(splits), channels), float("nan"))
    out[:used] = block_scales(gen, (used, channels)).cpu()
    return out.to("cuda")


def dequant_rows(codes, s):
    """Row-wise [T, C] codes with [ceil(C/128), T] scales, in float64."""
    c = codes.to("cpu", torch.float64)
    return c * s.to("cpu", torch.float64).T.repeat_interleave(BLOCK, 1)[:, :c.shape[1]]


def dequant_weight(codes, s):
    """[G, R, C] codes with [G, ceil(R/128), ceil(C/128)] scales, in float64."""
    c = codes.to("cpu", torch.float64)
    full = s.to("cpu", torch.float64).repeat_interleave(BLOCK, 1).repeat_interleave(BLOCK, 2)
    return c * full[:, :c.shape[1], :c.shape[2]]


def dequant_columnwise(codes, s, splits):
    """Row-wise [T, C] codes with the column-wise copy's [capacity, C] scales, in float64."""
    out = codes.to("cpu", torch.float64).clone()
    s = s.to("cpu", torch.float64)
    row = block = 0
    for m in splits:
        if m:
            out[row:row + m] *= s[block + torch.arange(m) // BLOCK]
        row += m
        block += cdiv(m, BLOCK)
    return out


def grouped_reference(role, a, b, splits, groups):
    """fwd: a [T, K] @ b[g].T; dgrad: a [T, N] @ b[g]; wgrad: a_g.T @ b_g (float64)."""
    if role == "wgrad":
        out = torch.zeros(groups, a.shape[1], b.shape[1], dtype=torch.float64)
    else:
        out = torch.empty(a.shape[0], b.shape[1] if role == "forward" else b.shape[2],
                          dtype=torch.float64)
    row = 0
    for g, m in enumerate(splits):
        if role == "forward":
            out[row:row + m] = a[row:row + m] @ b[g].T
        elif role == "dgrad":
            out[row:row + m] = a[row:row + m] @ b[g]
        else:
            out[g] = a[row:row + m].T @ b[row:row + m]
        row += m
    return out


# (groups, rows, K, N, fixed splits or None): K and N multiples of 16, below,
# at and above 128-multiples; random group sizes with empty groups, and fixed
# ones ending on and off 128-row block boundaries.
BLOCK_CASES = [(7, 300, 144, 208, None), (4, 1100, 256, 384, None), (3, 517, 528, 64, None),
               (6, 794, 1024, 128, (128, 0, 255, 1, 384, 26))]


@pytest.mark.parametrize("device_splits", [False, True], ids=["host_splits", "device_splits"])
@pytest.mark.parametrize("case", BLOCK_CASES,
                         ids=[f"G{g}-T{t}-K{k}-N{n}" for g, t, k, n, _ in BLOCK_CASES])
def test_block_scaled_kernel_matches_reference(block_kernel, case, device_splits, tile_order,
                                               gen):
    kernel = block_kernel
    role, a_fmt = kernel.split("_")[:2]
    groups, rows, k, n, fixed = case
    splits = list(fixed) if fixed else make_splits(gen, rows, groups, "random_with_zeros")
    assert len(splits) == groups and sum(splits) == rows
    m_splits = torch.tensor(splits, device="cuda") if device_splits else splits
    if role == "forward":
        x, w = codes(gen, (rows, k), "e4m3"), codes(gen, (groups, n, k), "e4m3")
        sx = row_block_scales(gen, rows, k)
        sw = block_scales(gen, (groups, cdiv(n, BLOCK), cdiv(k, BLOCK)))
        ref = grouped_reference(role, dequant_rows(x, sx), dequant_weight(w, sw), splits, groups)
        check_forward(kernel, ref, splits, gen,
                      lambda bias, out: ops.fp8_forward(x, sx, w, sw, bias, m_splits, out=out,
                                                        engine=ENGINE))
    elif role == "dgrad":
        dy, w = codes(gen, (rows, n), a_fmt), codes(gen, (groups, n, k), "e4m3")
        sdy = row_block_scales(gen, rows, n)
        sw = block_scales(gen, (groups, cdiv(n, BLOCK), cdiv(k, BLOCK)))
        # The column-wise copy: each W_g and its 128x128 block scales transposed.
        w_t = w.float().transpose(1, 2).contiguous().to(w.dtype)
        sw_t = sw.transpose(1, 2).contiguous()
        ref = grouped_reference(role, dequant_rows(dy, sdy), dequant_weight(w, sw), splits, groups)
        out, guards_intact = guarded_output((rows, k), out_dtype(kernel))
        ops.fp8_dgrad(dy, sdy, w_t, sw_t, m_splits, out=out, engine=ENGINE)
        check_output(kernel, out, guards_intact, ref)
    else:
        dy, x = codes(gen, (rows, n), a_fmt), codes(gen, (rows, k), "e4m3")
        sdy, sx = column_block_scales(gen, n, splits), column_block_scales(gen, k, splits)
        ref = grouped_reference(role, dequant_columnwise(dy, sdy, splits),
                                dequant_columnwise(x, sx, splits), splits, groups)
        # Zeros in the padding between groups, as the quantizers write them
        # (the kernels read a group's padding as part of its reduction).
        dy_t, x_t = columnwise(dy, splits), columnwise(x, splits)
        check_wgrad(kernel, lambda **out: ops.fp8_wgrad(dy_t, sdy, x_t, sx, m_splits, rows, **out,
                                                        engine=ENGINE), ref, splits, gen)


def _block_operands(role, gen, groups, rows, k, n, splits, dtype=torch.bfloat16):
    """(run(engine), float64 reference) for one blockwise-scaled product with
    a `dtype` output."""
    if role == "forward":
        x, w = codes(gen, (rows, k), "e4m3"), codes(gen, (groups, n, k), "e4m3")
        sx = row_block_scales(gen, rows, k)
        sw = block_scales(gen, (groups, cdiv(n, BLOCK), cdiv(k, BLOCK)))
        ref = grouped_reference(role, dequant_rows(x, sx), dequant_weight(w, sw), splits, groups)
        return (lambda engine: ops.fp8_forward(x, sx, w, sw, None, splits, out_dtype=dtype,
                                               engine=engine)), ref
    if role == "dgrad":
        dy, w = codes(gen, (rows, n), "e5m2"), codes(gen, (groups, n, k), "e4m3")
        sdy = row_block_scales(gen, rows, n)
        sw = block_scales(gen, (groups, cdiv(n, BLOCK), cdiv(k, BLOCK)))
        w_t = w.float().transpose(1, 2).contiguous().to(w.dtype)
        sw_t = sw.transpose(1, 2).contiguous()
        ref = grouped_reference(role, dequant_rows(dy, sdy), dequant_weight(w, sw), splits, groups)
        return (lambda engine: ops.fp8_dgrad(dy, sdy, w_t, sw_t, splits, out_dtype=dtype,
                                             engine=engine)), ref
    dy, x = codes(gen, (rows, n), "e5m2"), codes(gen, (rows, k), "e4m3")
    sdy, sx = column_block_scales(gen, n, splits), column_block_scales(gen, k, splits)
    ref = grouped_reference(role, dequant_columnwise(dy, sdy, splits),
                            dequant_columnwise(x, sx, splits), splits, groups)
    dy_t, x_t = columnwise(dy, splits), columnwise(x, splits)
    return (lambda engine: ops.fp8_wgrad(dy_t, sdy, x_t, sx, splits, rows, out_dtype=dtype,
                                         engine=engine)), ref


def assert_same_bits(production, kernel, shape, run):
    """Runs `run(out)` with each kernel forced, into NaN-poisoned guarded bf16
    outputs of `shape`: `kernel` must write every element and give
    `production`'s bits."""
    outs = {}
    try:
        for name in (production, kernel):
            ops.set_kernel_override("cuda", ENGINE, name)
            out, guards_intact = guarded_output(shape, torch.bfloat16)
            run(out)
            assert guards_intact(), f"{name} wrote outside its output"
            outs[name] = out
    finally:
        ops.set_kernel_override("cuda", ENGINE, "")
    assert not torch.isnan(outs[kernel]).any(), f"{kernel} left elements unwritten"
    assert torch.equal(outs[production], outs[kernel]), f"{kernel}: bits differ from {production}"


PIPELINED_BLOCK_KERNELS = [k for k in BLOCK_KERNELS if "_block_pipecoop" in k] or [
    pytest.param("none", marks=pytest.mark.skip(
        reason="no pipelined blockwise candidate built (GL_SM90_TUNING, sm90 engine)"))]


@pytest.mark.parametrize("reduction", [128, 256, 640, 1024], ids=lambda r: f"R{r}")
@pytest.mark.parametrize("pipelined_kernel", PIPELINED_BLOCK_KERNELS)
def test_pipelined_block_promotion_gives_the_production_bits(pipelined_kernel, reduction, gen):
    """The pipelined blockwise promotion (block_pipelined_promotion_mainloop.cuh)
    runs CUTLASS's operations in CUTLASS's order, only overlapped: the same
    bits as the kernel it would replace, for 1, 2, 5 and 8 k-tiles (each path
    of its loop)."""
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    kernel = pipelined_kernel
    role, a_fmt = kernel.split("_")[:2]
    production = kernel.replace("_pipecoop", "_coop")
    assert production in ops.kernel_names("cuda", ENGINE)
    groups, rows, width = 6, 1100, 384  # width: the output's columns
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    if role == "forward":
        k, n = reduction, width
        x, w = codes(gen, (rows, k), "e4m3"), codes(gen, (groups, n, k), "e4m3")
        sx = row_block_scales(gen, rows, k)
        sw = block_scales(gen, (groups, cdiv(n, BLOCK), cdiv(k, BLOCK)))
        run = lambda out: ops.fp8_forward(x, sx, w, sw, None, splits, out=out, engine=ENGINE)
    else:
        k, n = width, reduction
        dy, w = codes(gen, (rows, n), a_fmt), codes(gen, (groups, n, k), "e4m3")
        sdy = row_block_scales(gen, rows, n)
        sw = block_scales(gen, (groups, cdiv(n, BLOCK), cdiv(k, BLOCK)))
        w_t = w.float().transpose(1, 2).contiguous().to(w.dtype)
        sw_t = sw.transpose(1, 2).contiguous()
        run = lambda out: ops.fp8_dgrad(dy, sdy, w_t, sw_t, splits, out=out, engine=ENGINE)
    assert_same_bits(production, kernel, (rows, width), run)


STAGGERED_KERNELS = [k for k in BLOCK_KERNELS if "_staggercoop" in k] or _NONE


@pytest.mark.parametrize("reduction", [128, 640, 1408], ids=lambda r: f"R{r}")
@pytest.mark.parametrize("staggered_kernel", STAGGERED_KERNELS)
def test_staggered_promotion_over_many_tiles(staggered_kernel, reduction, gen):
    """The warpgroups taking turns at the tensor cores (tensor_core_turns.cuh)
    hand over through named barriers that must balance within every tile:
    more tiles than CTAs (2000 rows in 6 groups over 2048 outputs, about 170
    tiles of 128 x 256; each CTA runs several, of different k-tile counts,
    empty groups' among them), against float64. A barrier left unmatched
    hangs the next tile or lets a warpgroup read a stage still in use."""
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    kernel = staggered_kernel
    role, a_fmt = kernel.split("_")[:2]
    groups, rows, width = 6, 2000, 2048
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    # forward: X [T, K] by W_g [N, K], K = reduction; dgrad: dY [T, N] by
    # W_g [N, K], N = reduction.
    k, n = (reduction, width) if role == "forward" else (width, reduction)
    a = codes(gen, (rows, k if role == "forward" else n), a_fmt)
    w = codes(gen, (groups, n, k), "e4m3")
    sa = row_block_scales(gen, rows, a.shape[1])
    sw = block_scales(gen, (groups, cdiv(n, BLOCK), cdiv(k, BLOCK)))
    ref = grouped_reference(role, dequant_rows(a, sa), dequant_weight(w, sw), splits, groups)
    try:
        ops.set_kernel_override("cuda", ENGINE, kernel)
        out, guards_intact = guarded_output(tuple(ref.shape), out_dtype(kernel))
        if role == "forward":
            ops.fp8_forward(a, sa, w, sw, None, splits, out=out, engine=ENGINE)
        else:  # the weights' column-wise copy: each W_g and its block scales transposed
            w_t = w.float().transpose(1, 2).contiguous().to(w.dtype)
            ops.fp8_dgrad(a, sa, w_t, sw.transpose(1, 2).contiguous(), splits, out=out,
                          engine=ENGINE)
    finally:
        ops.set_kernel_override("cuda", ENGINE, "")
    check_output(kernel, out, guards_intact, ref)


@pytest.mark.parametrize("dtype", OUTPUTS, ids=OUTPUT_IDS)
@pytest.mark.parametrize("role", ["forward", "dgrad", "wgrad"])
def test_block_scaled_kernels_agree_with_emulation(role, dtype, gen):
    """With block scales the engine picks its block-scaled kernels on its own
    (no override), for each output dtype, and they agree with the
    dequantize-then-float32 emulation."""
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    groups, rows, k, n = 5, 333, 96, 160
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    run, ref = _block_operands(role, gen, groups, rows, k, n, splits, dtype)
    kernels, emulated = run(ENGINE), run("emulate")
    assert kernels.dtype == dtype
    tol = out_tolerance(dtype)
    assert_close_rel(kernels, ref, dtype, f"{role}: kernels vs float64", tol=tol)
    assert_close_rel(kernels, emulated.double(), dtype, f"{role}: kernels vs emulation", tol=tol)


@pytest.mark.parametrize("role", ["forward", "dgrad", "wgrad"])
def test_unsupported_block_problems_are_emulated(role, gen):
    """Shapes the kernels cannot read (K or N not a multiple of 16) still give
    the right products: the engine emulates them."""
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    groups, rows, k, n = 3, 200, 72, 136
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    run, ref = _block_operands(role, gen, groups, rows, k, n, splits)
    assert_close_rel(run(ENGINE), ref, torch.bfloat16, f"{role}: emulated block-scaled product")


def test_mixed_scaling_is_emulated(gen):
    """Blockwise activations with per-tensor weights: no kernel reads that
    mix, so the engine emulates it."""
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    groups, rows, k, n = 4, 300, 256, 128
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    x, w = codes(gen, (rows, k), "e4m3"), codes(gen, (groups, n, k), "e4m3")
    sx, sw = row_block_scales(gen, rows, k), scales(gen, groups)
    wd = torch.stack([f64(w[g], sw[g]) for g in range(groups)])
    ref = grouped_reference("forward", dequant_rows(x, sx), wd, splits, groups)
    out = ops.fp8_forward(x, sx, w, sw, None, splits, engine=ENGINE)
    assert_close_rel(out, ref, torch.bfloat16, "fwd: block x per-tensor")


# ---- the operand maps' L2 promotion --------------------------------------------

def _fp8_role_output(kernel, case, gen):
    """One call of a per-tensor FP8 kernel's role on fresh codes; its output."""
    role, a_fmt = kernel.split("_")[:2]
    groups, rows, k, n = case
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    dtype = out_dtype(kernel)
    if role == "forward":
        x, w = codes(gen, (rows, k), "e4m3"), codes(gen, (groups, n, k), "e4m3")
        out, _ = guarded_output((rows, n), dtype)
        ops.fp8_forward(x, scales(gen, 1), w, scales(gen, groups), None, splits, out=out,
                        engine=ENGINE)
    elif role == "dgrad":
        dy, w = codes(gen, (rows, n), a_fmt), codes(gen, (groups, k, n), "e4m3")
        out, _ = guarded_output((rows, k), dtype)
        ops.fp8_dgrad(dy, scales(gen, 1), w, scales(gen, groups), splits, out=out, engine=ENGINE)
    else:
        dy, x = codes(gen, (rows, n), a_fmt), codes(gen, (rows, k), "e4m3")
        out, _ = guarded_output((groups, n, k), dtype)
        ops.fp8_wgrad(columnwise(dy, splits), scales(gen, 1), columnwise(x, splits),
                      scales(gen, 1), splits, rows, out=out, accumulate=False, engine=ENGINE)
    return out


def test_fp8_kernel_gives_the_same_bits_under_each_l2_promotion(kernel):
    """'256B' promotion changes how L2 fetches the codes, never what a
    kernel computes: each FP8 kernel writes the bits it writes under the
    default, which the tests above check against float64."""
    outs = {}
    try:
        for promotion in ("128B", "256B"):
            ops.set_l2_promotion("cuda", ENGINE, promotion)
            outs[promotion] = _fp8_role_output(kernel, CASES[1], torch.Generator().manual_seed(7))
    finally:
        ops.set_l2_promotion("cuda", ENGINE, "")
    assert not torch.isnan(outs["256B"]).any(), f"{kernel} left elements unwritten under 256B"
    assert torch.equal(outs["128B"], outs["256B"]), f"{kernel}: results differ under 256B"


@pytest.mark.parametrize("recipe", ["delayed", "block"])
def test_training_step_gives_the_same_bits_under_each_l2_promotion(recipe):
    """A whole FP8 step (casts, forward, dgrad, wgrad; the blockwise kernels
    included) under '256B' gives the default's output and gradients."""
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    from grouped_linear import fp8
    results = {}
    try:
        for promotion in ("128B", "256B"):
            ops.set_l2_promotion("cuda", ENGINE, promotion)
            torch.manual_seed(3)
            m = grouped_linear.GroupedLinear(6, 384, 512, bias=False, params_dtype=torch.bfloat16,
                                             device="cuda")
            x = torch.randn(2000, 384, dtype=torch.bfloat16, device="cuda", requires_grad=True)
            r = fp8.DelayedScaling() if recipe == "delayed" else fp8.Float8BlockScaling()
            with grouped_linear.autocast(recipe=r):
                y = m(x, [700, 0, 301, 555, 44, 400])
            y.float().square().sum().backward()
            results[promotion] = (y, x.grad, m.weight.grad)
    finally:
        ops.set_l2_promotion("cuda", ENGINE, "")
    for name, a, b in zip(("out", "grad_input", "grad_weight"), results["128B"], results["256B"]):
        assert torch.equal(a, b), f"{recipe}: {name} differs under 256B"


# ---- which kernels a layer's step runs, by its dtype --------------------------

_STEP_SCRIPT = textwrap.dedent("""
    import sys, torch, grouped_linear as gl
    from grouped_linear import fp8
    dtype = getattr(torch, sys.argv[1])
    recipe = {"delayed": fp8.DelayedScaling(), "current": fp8.Float8CurrentScaling(),
              "block": fp8.Float8BlockScaling()}[sys.argv[2]]
    m = gl.GroupedLinear(4, 256, 384, bias=True, params_dtype=dtype, device="cuda")
    x = torch.randn(700, 256, dtype=dtype, device="cuda", requires_grad=True)
    with gl.autocast(recipe=recipe):
        y = m(x, [300, 0, 256, 144])
    y.float().square().sum().backward()
    torch.cuda.synchronize()
    assert y.dtype == x.grad.dtype == m.weight.grad.dtype == m.bias.grad.dtype == dtype
""")


@pytest.mark.parametrize("recipe", ["delayed", "current", "block"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_fp16_and_fp32_layers_run_fp8_kernels(dtype, recipe):
    """An FP8 training step of an fp16 or fp32 layer runs the engine's FP8
    kernels for that output dtype in all three roles, not the float32
    emulation (the engine's choices, from GROUPED_LINEAR_LOG_LEVEL=info, read
    once per process, hence a subprocess)."""
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    env = dict(os.environ, GROUPED_LINEAR_LOG_LEVEL="info")
    proc = subprocess.run([sys.executable, "-c", _STEP_SCRIPT, dtype, recipe],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    log = proc.stderr
    assert "running the emulation" not in log, log
    out = {"float16": "fp16", "float32": "(fp32|to_fp32)"}[dtype]
    block = "_block" if recipe == "block" else ""
    for role in ("forward", "dgrad", "wgrad"):
        pattern = rf"{role}: FP8 sm90_grouped kernel {role}_e[45]m[23]_{out}{block}_"
        assert re.search(pattern, log), f"no {pattern!r} in the log:\n{log}"


# ---- wgrad split along its reduction ----------------------------------------

# Few output tiles over long reductions: the engine splits each group's rows
# into pieces (sm90/split_reduction.h: here 4, 2 and 2 pieces), a float32
# wgrad kernel writes each piece's gradient and one pass sums them
# (sum_partials.cu). Same float64 reference, guarded NaN-poisoned outputs,
# an empty group in the third case; tolerances as above (the pieces' kernels
# promote, so the fp32 bound holds for fast accumulation too).
SPLIT_CASES = [(1, 8192, 512, 256), (2, 12000, 144, 208), (3, 16000, 272, 80)]


@pytest.mark.parametrize("split_accumulator", [True, False], ids=["split", "fast"])
@pytest.mark.parametrize("dtype", OUTPUTS, ids=OUTPUT_IDS)
@pytest.mark.parametrize("case", SPLIT_CASES, ids=[f"G{g}-T{t}-K{k}-N{n}"
                                                   for g, t, k, n in SPLIT_CASES])
def test_wgrad_split_along_its_reduction_matches_reference(case, dtype, split_accumulator, gen):
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    groups, rows, k, n = case
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    dy, x = codes(gen, (rows, n), "e5m2"), codes(gen, (rows, k), "e4m3")
    sdy, sx = scales(gen, 1), scales(gen, 1)
    ref = torch.stack([f64(dyg, sdy).T @ f64(xg, sx)
                       for dyg, xg in zip(dy.split(splits), x.split(splits))])
    dy_t, x_t = columnwise(dy, splits), columnwise(x, splits)
    what = f"split wgrad G{groups} T{rows} into {dtype}"
    out, guards_intact = guarded_output((groups, n, k), dtype)
    ops.fp8_wgrad(dy_t, sdy, x_t, sx, splits, rows, out=out, split_accumulator=split_accumulator,
                  engine=ENGINE)
    check_output(what, out, guards_intact, ref)
    prior = torch.randn(groups, n, k, generator=gen).to("cuda", dtype)
    buffer = prior.clone()
    ops.fp8_wgrad(dy_t, sdy, x_t, sx, splits, rows, out=buffer, accumulate=True,
                  split_accumulator=split_accumulator, engine=ENGINE)
    assert_close_rel(buffer, prior.to("cpu", torch.float64) + ref, dtype, f"{what}, accumulated",
                     tol=out_tolerance(dtype))
    for g, m in enumerate(splits):
        if m == 0:
            assert torch.count_nonzero(out[g]) == 0, f"{what}: empty group {g} not zero"
            assert torch.equal(buffer[g], prior[g]), f"{what}: empty group {g} changed"
