"""Every FP8 kernel of the sm90_grouped engine, forced by name, against a
float64 reference computed from the same FP8 codes and scales (skipped
without an sm_90 GPU). The operands are built here in plain torch, in the
layouts of core/fp8/fp8_tensor.h (row-wise, each W_g transposed, and the
group-aligned column-wise copies), independently of the quantize kernels.

Tolerance: products of FP8 codes are exact in fp32 and the kernels sum in
fp32 (CUTLASS's FP8 mainloop promotes its tensor-core partial sums into fp32
registers every few k-blocks), so the error is the output's rounding: the
bf16 tolerance for bf16 outputs. For fp32 outputs (main_grad) the bound is
3e-4: inside one 128-deep k-block (4 wgmma instructions, before each
promotion into fp32 registers) the tensor core adds FP8 products at a
reduced accumulator width (about 13 mantissa bits), so the error is about
2^-13 per k-block rather than fp32's 2^-24; measured up to 1.0e-4 on the
H200 for reductions of 200 to 500 rows."""

import pytest
import torch

import grouped_linear
from grouped_linear import ops

from gl_testutil import assert_close_rel, make_splits

ENGINE = "sm90_grouped"
FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
GROUP_ALIGN = 16


def _fp8_kernels():
    if not grouped_linear.with_cuda or ENGINE not in ops.engine_names("cuda"):
        return []
    return [k for k in ops.kernel_names("cuda", ENGINE) if "_e4m3_" in k or "_e5m2_" in k]


def _sm90_available():
    return (torch.cuda.is_available() and grouped_linear.with_cuda
            and torch.cuda.get_device_capability() == (9, 0))


KERNELS = _fp8_kernels() or [pytest.param("none", marks=pytest.mark.skip(
    reason=f"grouped_linear was built without the {ENGINE} engine"))]

# (groups, rows, K, N): K and N multiples of 16 (what FP8 rows need) but not
# of any tile; empty groups and groups of odd sizes.
CASES = [(7, 300, 144, 208), (40, 1000, 80, 272), (3, 517, 528, 64)]


@pytest.fixture
def kernel(request):
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    ops.set_kernel_override("cuda", ENGINE, request.param)
    request.addfinalizer(lambda: ops.set_kernel_override("cuda", ENGINE, ""))
    return request.param


def pytest_generate_tests(metafunc):
    if "kernel" in metafunc.fixturenames:
        metafunc.parametrize("kernel", KERNELS, indirect=True)


def codes(gen, shape, fmt):
    """Random FP8 codes (never all zero), saturating below the format's max."""
    v = torch.randn(*shape, generator=gen) * (FP8_MAX[fmt] / 8)
    return v.clamp(-FP8_MAX[fmt], FP8_MAX[fmt]).to(FORMATS[fmt]).to("cuda")


def scales(gen, count):
    return (torch.rand(count, generator=gen) * 0.01 + 1e-3).to("cuda")


def columnwise(a, splits):
    """[T, C] -> [C, P]: group g's rows as columns from sum_{j<g} roundup(m_j, 16), zeros between."""
    groups, rows = len(splits), a.shape[0]
    width = -(-(rows + (GROUP_ALIGN - 1) * groups) // GROUP_ALIGN) * GROUP_ALIGN
    out = torch.zeros(a.shape[1], width, dtype=torch.float32, device=a.device)
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
def test_fp8_kernel_matches_reference(kernel, case, device_splits, gen):
    role, a_fmt = kernel.split("_")[:2]
    groups, rows, k, n = case
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    m_splits = torch.tensor(splits, device="cuda") if device_splits else splits
    if role == "forward":
        x, w = codes(gen, (rows, k), "e4m3"), codes(gen, (groups, n, k), "e4m3")
        sx, sw = scales(gen, 1), scales(gen, groups)
        bias = torch.randn(groups, n, generator=gen).to("cuda", torch.bfloat16)
        ref = torch.empty(rows, n, dtype=torch.float64)
        row = 0
        for g, m in enumerate(splits):
            ref[row:row + m] = (f64(x[row:row + m], sx) @ f64(w[g], sw[g]).T
                                + bias[g].to("cpu", torch.float64))
            row += m
        out = torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        ops.fp8_forward(x, sx, w, sw, bias, m_splits, out=out, engine=ENGINE)
        assert_close_rel(out, ref, torch.bfloat16, kernel)
    elif role == "dgrad":
        dy, w = codes(gen, (rows, n), a_fmt), codes(gen, (groups, n, k), "e4m3")
        sdy, sw = scales(gen, 1), scales(gen, groups)
        w_t = w.float().transpose(1, 2).contiguous().to(w.dtype)
        ref = torch.empty(rows, k, dtype=torch.float64)
        row = 0
        for g, m in enumerate(splits):
            ref[row:row + m] = f64(dy[row:row + m], sdy) @ f64(w[g], sw[g])
            row += m
        out = torch.full((rows, k), float("nan"), dtype=torch.bfloat16, device="cuda")
        ops.fp8_dgrad(dy, sdy, w_t, sw, m_splits, out=out, engine=ENGINE)
        assert_close_rel(out, ref, torch.bfloat16, kernel)
    else:
        dy, x = codes(gen, (rows, n), a_fmt), codes(gen, (rows, k), "e4m3")
        sdy, sx = scales(gen, 1), scales(gen, 1)
        ref = torch.zeros(groups, n, k, dtype=torch.float64)
        row = 0
        for g, m in enumerate(splits):
            ref[g] = f64(dy[row:row + m], sdy).T @ f64(x[row:row + m], sx)
            row += m
        dy_t, x_t = columnwise(dy, splits), columnwise(x, splits)
        if "to_fp32" in kernel:
            prior = torch.randn(groups, n, k, generator=gen).to("cuda")
            buffer = prior.clone()
            ops.fp8_wgrad(dy_t, sdy, x_t, sx, m_splits, rows, out=buffer, accumulate=True,
                          engine=ENGINE)
            assert_close_rel(buffer, prior.to("cpu", torch.float64) + ref, torch.float32, kernel,
                             tol=3e-4)
            for g, m in enumerate(splits):
                if m == 0:
                    assert torch.equal(buffer[g], prior[g]), f"{kernel}: empty group {g} changed"
        else:
            out = torch.full((groups, n, k), float("nan"), dtype=torch.bfloat16, device="cuda")
            ops.fp8_wgrad(dy_t, sdy, x_t, sx, m_splits, rows, out=out, engine=ENGINE)
            assert_close_rel(out, ref, torch.bfloat16, kernel)
            for g, m in enumerate(splits):
                if m == 0:
                    assert torch.count_nonzero(out[g]) == 0, f"{kernel}: empty group {g} not zero"


@pytest.mark.parametrize("role", ["forward", "dgrad", "wgrad"])
def test_fp8_kernels_agree_with_emulation(role, gen):
    """The engine's FP8 kernels and the dequantize-then-float32 emulation give
    the same products (both within bf16 rounding of the float64 values)."""
    if not _sm90_available():
        pytest.skip("needs an sm_90 GPU")
    groups, rows, k, n = 5, 333, 96, 160
    splits = make_splits(gen, rows, groups, "random_with_zeros")
    if role == "forward":
        x, w, sx, sw = codes(gen, (rows, k), "e4m3"), codes(gen, (groups, n, k), "e4m3"), \
            scales(gen, 1), scales(gen, groups)
        run = lambda engine: ops.fp8_forward(x, sx, w, sw, None, splits, engine=engine)
    elif role == "dgrad":
        dy, w, s1, sw = codes(gen, (rows, n), "e5m2"), codes(gen, (groups, n, k), "e4m3"), \
            scales(gen, 1), scales(gen, groups)
        w_t = w.float().transpose(1, 2).contiguous().to(w.dtype)
        run = lambda engine: ops.fp8_dgrad(dy, s1, w_t, sw, splits, engine=engine)
    else:
        dy, x, s1, s2 = codes(gen, (rows, n), "e5m2"), codes(gen, (rows, k), "e4m3"), \
            scales(gen, 1), scales(gen, 1)
        dy_t, x_t = columnwise(dy, splits), columnwise(x, splits)
        run = lambda engine: ops.fp8_wgrad(dy_t, s1, x_t, s2, splits, rows, engine=engine)
    kernels, emulated = run(ENGINE), run("emulate")
    assert_close_rel(kernels, emulated.double(), torch.bfloat16, f"{role}: kernels vs emulation")
