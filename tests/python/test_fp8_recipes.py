"""FP8 recipes, autocast and the CPU quantization reference (CPU only: the
GPU quantize kernels, once there, are compared with these bits)."""

import threading

import pytest
import torch

import grouped_linear
from grouped_linear import fp8

FORMATS = {"E4M3": torch.float8_e4m3fn, "E5M2": torch.float8_e5m2}


# --- recipes ---------------------------------------------------------------

def test_recipe_defaults_follow_transformer_engine():
    d = fp8.DelayedScaling()
    assert (d.margin, d.fp8_format, d.amax_history_len, d.amax_compute_algo) == (
        0, fp8.Format.HYBRID, 1024, "max")
    assert fp8.Float8CurrentScaling().fp8_format == fp8.Format.HYBRID
    assert fp8.Float8BlockScaling().fp8_format == fp8.Format.E4M3
    # TE's GEMM options: the forward with fast accumulation, the gradients in
    # fp32 (DelayedScaling's _2X_ACC_* constants, Float8CurrentScaling's
    # fp8_gemm_* fields); blockwise scaling in fp32 throughout.
    assert fp8.MMParams().use_split_accumulator is True
    for recipe in (d, fp8.Float8CurrentScaling()):
        assert (recipe.fp8_gemm_fprop.use_split_accumulator,
                recipe.fp8_gemm_dgrad.use_split_accumulator,
                recipe.fp8_gemm_wgrad.use_split_accumulator) == (False, True, True)
    b = fp8.Float8BlockScaling()
    assert (b.fp8_gemm_fprop, b.fp8_gemm_dgrad, b.fp8_gemm_wgrad) == (fp8.MMParams(),) * 3


@pytest.mark.parametrize("recipe, kind, fwd, bwd, power_2", [
    (fp8.DelayedScaling(), "delayed", "E4M3", "E5M2", False),
    (fp8.DelayedScaling(fp8_format=fp8.Format.E4M3, margin=2, amax_history_len=16,
                        amax_compute_algo="most_recent"), "delayed", "E4M3", "E4M3", False),
    (fp8.Float8CurrentScaling(), "current", "E4M3", "E5M2", False),
    (fp8.Float8BlockScaling(), "block", "E4M3", "E4M3", True),
    (fp8.Float8CurrentScaling(fp8_gemm_fprop=fp8.MMParams(True),
                              fp8_gemm_wgrad=fp8.MMParams(use_split_accumulator=False)),
     "current", "E4M3", "E5M2", False),
])
def test_recipe_native_mirror(recipe, kind, fwd, bwd, power_2):
    native = recipe.to_native()
    assert native.kind == kind
    assert (native.forward_format, native.backward_format) == (fwd, bwd)
    assert native.power_2_scales == power_2
    assert (native.fprop_split_accumulator, native.dgrad_split_accumulator,
            native.wgrad_split_accumulator) == tuple(
        getattr(recipe, f"fp8_gemm_{g}").use_split_accumulator for g in ("fprop", "dgrad", "wgrad"))
    if kind == "delayed":
        assert native.margin == recipe.margin
        assert native.amax_history_len == recipe.amax_history_len
        assert native.amax_compute_algo == recipe.amax_compute_algo


@pytest.mark.parametrize("kwargs, exc, pattern", [
    ({"margin": -1}, ValueError, r"margin: got -1, expected an int >= 0"),
    ({"amax_history_len": 0}, ValueError, r"amax_history_len: got 0"),
    ({"amax_compute_algo": "mean"}, ValueError, r"amax_compute_algo: got 'mean'"),
    ({"fp8_format": "E3M4"}, TypeError, r"fp8_format: got 'E3M4'"),
    ({"fp8_gemm_fprop": True}, TypeError,
     r"fp8_gemm_fprop: got True, expected a grouped_linear.fp8.MMParams"),
])
def test_bad_recipe_is_a_clear_error(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        fp8.DelayedScaling(**kwargs).to_native()


def test_bad_gemm_params_are_a_clear_error():
    with pytest.raises(TypeError, match=r"use_split_accumulator: got 1, expected a bool"):
        fp8.MMParams(use_split_accumulator=1)
    with pytest.raises(TypeError, match=r"fp8_gemm_wgrad: got None"):
        grouped_linear.autocast(recipe=fp8.Float8CurrentScaling(fp8_gemm_wgrad=None))


def test_split_accumulator_of_the_fp8_ops(gen):
    """ops.fp8_*'s split_accumulator: a bool; the CPU emulation sums in fp32
    whichever is asked (only GPU kernels accumulate differently)."""
    from grouped_linear import ops
    x = (torch.randn(6, 32, generator=gen) * 8).to(torch.float8_e4m3fn)
    w = (torch.randn(2, 16, 32, generator=gen) * 8).to(torch.float8_e4m3fn)
    sx, sw = torch.tensor([0.5]), torch.tensor([0.25, 2.0])
    split = ops.fp8_forward(x, sx, w, sw, None, [2, 4])
    fast = ops.fp8_forward(x, sx, w, sw, None, [2, 4], split_accumulator=False)
    assert torch.equal(split, fast) and torch.isfinite(split).all()
    with pytest.raises(TypeError, match=r"split_accumulator: got 'no', expected a bool"):
        ops.fp8_forward(x, sx, w, sw, None, [2, 4], split_accumulator="no")
    assert torch.equal(ops.fp8_forward(x, sx, w, sw, None, [2, 4]), split)


def test_recipe_codes_carry_the_accumulation_choice():
    """torch.compile's int list (grouped_linear::fp8_forward's recipe) holds
    the three use_split_accumulator flags as bits: fprop 1, dgrad 2, wgrad 4."""
    assert fp8._encode(fp8.DelayedScaling().to_native())[6] == 6
    assert fp8._encode(fp8.Float8BlockScaling().to_native())[6] == 7
    fast_wgrad = fp8.Float8CurrentScaling(fp8_gemm_wgrad=fp8.MMParams(False))
    assert fp8._encode(fast_wgrad.to_native())[6] == 2


def test_recipe_codes_hold_every_field():
    """The int list, encoded in C++ beside its decoder: kind, format, margin,
    history length, amax algorithm, power-of-2 scales, accumulation bits."""
    delayed = fp8.DelayedScaling(margin=2, fp8_format=fp8.Format.E4M3, amax_history_len=16,
                                 amax_compute_algo="most_recent")
    assert fp8._encode(delayed.to_native()) == (0, 0, 2, 16, 1, 0, 6)
    current = fp8.Float8CurrentScaling(fp8_format=fp8.Format.HYBRID,
                                       fp8_gemm_fprop=fp8.MMParams(True))
    assert fp8._encode(current.to_native())[:2] == (1, 2)
    assert fp8._encode(current.to_native())[6] == 7
    assert fp8._encode(fp8.Float8BlockScaling().to_native())[0] == 2


# --- autocast --------------------------------------------------------------

def test_autocast_nests_and_restores():
    assert not fp8.is_enabled()
    with grouped_linear.autocast(recipe=fp8.Float8CurrentScaling()):
        assert fp8.is_enabled() and fp8.current_recipe().kind == "current"
        with grouped_linear.autocast(enabled=False):
            assert not fp8.is_enabled()
        with grouped_linear.autocast(recipe=fp8.Float8BlockScaling()):
            assert fp8.current_recipe().kind == "block"
        assert fp8.current_recipe().kind == "current"
    assert not fp8.is_enabled() and grouped_linear._C.fp8.autocast_depth() == 0


def test_autocast_default_recipe_is_delayed_scaling():
    with grouped_linear.autocast():
        assert fp8.current_recipe().kind == "delayed"
        assert fp8.current_recipe().fp8_format == "HYBRID"


def test_autocast_as_decorator_and_on_exceptions():
    @grouped_linear.autocast(recipe=fp8.Float8BlockScaling())
    def inside():
        return fp8.is_enabled(), fp8.current_recipe().kind

    assert inside() == (True, "block")
    assert not fp8.is_enabled()
    with pytest.raises(KeyError):
        with grouped_linear.autocast():
            raise KeyError("boom")
    assert not fp8.is_enabled() and grouped_linear._C.fp8.autocast_depth() == 0


def test_autocast_is_per_thread():
    seen = {}
    with grouped_linear.autocast():
        worker = threading.Thread(target=lambda: seen.setdefault("enabled", fp8.is_enabled()))
        worker.start()
        worker.join()
    assert seen["enabled"] is False


def test_autocast_bad_arguments():
    with pytest.raises(TypeError, match="recipe: got str"):
        grouped_linear.autocast(recipe="delayed")
    with pytest.raises(TypeError, match="enabled: got 1"):
        grouped_linear.autocast(enabled=1)
    with pytest.raises(RuntimeError, match="exit without a matching entry"):
        grouped_linear._C.fp8.autocast_pop()


# --- quantization reference ---------------------------------------------------

@pytest.mark.parametrize("fmt", list(FORMATS))
def test_quantize_matches_torch_float8_in_range(fmt, gen):
    """torch's CPU cast is round-to-nearest-even too; in range the bits agree."""
    fmax = fp8.format_max(fmt)
    x = torch.randn(4096, generator=gen) * torch.exp2(torch.randint(-14, 8, (4096,), generator=gen))
    x = x.clamp(-fmax, fmax)
    codes = fp8.quantize(x, fmt, 1.0)
    expected = x.to(FORMATS[fmt]).view(torch.uint8)
    assert torch.equal(codes, expected)
    assert torch.equal(fp8.dequantize(codes, fmt, 1.0), expected.view(FORMATS[fmt]).float())


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_quantize_saturates_where_torch_does_not(fmt):
    fmax = fp8.format_max(fmt)
    x = torch.tensor([fmax * 4, -fmax * 4, float("inf"), -float("inf"), float("nan")])
    back = fp8.dequantize(fp8.quantize(x, fmt, 1.0), fmt, 1.0)
    assert back[:4].tolist() == [fmax, -fmax, fmax, -fmax]
    assert torch.isnan(back[4])


def test_quantize_applies_the_scale(gen):
    x = torch.randn(1000, generator=gen)
    scale = fp8.scale_from_amax(float(x.abs().max()), "E4M3")
    assert scale == pytest.approx(448.0 / float(x.abs().max()))
    codes = fp8.quantize(x, "E4M3", scale)
    back = fp8.dequantize(codes, "E4M3", 1.0 / scale)
    # E4M3 keeps 3 fraction bits: relative error 2^-4 for normal values.
    rel = ((back - x).abs() / x.abs().clamp_min(2.0 ** -6 / scale)).max()
    assert rel <= 2 ** -4 + 1e-6
    assert float(back.abs().max()) == pytest.approx(float(x.abs().max()), rel=2 ** -4)


def test_scale_from_bad_amax_keeps_previous():
    for bad in (0.0, float("inf"), float("nan")):
        assert fp8.scale_from_amax(bad, "E4M3", previous_scale=5.0) == 5.0
    assert fp8.scale_from_amax(2.0, "E4M3", margin=1) == 112.0
    assert fp8.scale_from_amax(2.0, "E4M3", power_2_scales=True) == 128.0


@pytest.mark.parametrize("block_rows", [1, 128], ids=["1x128", "128x128"])
def test_blockwise_scales_each_block(block_rows, gen):
    rows, cols = 200, 300
    x = torch.randn(rows, cols, generator=gen)
    x[:, 128:256] *= 1000.0   # a second column block with a much larger range
    codes, scale_inv = fp8.quantize_blockwise(x, "E4M3", block_rows)
    assert codes.shape == x.shape and codes.dtype == torch.uint8
    assert scale_inv.shape == (-(-rows // block_rows), 3)
    mantissa, _ = torch.frexp(scale_inv)
    assert torch.all(mantissa == 0.5), "block scales are powers of two"
    # Each block's own amax sets its scale: the scaled amax lies in (224, 448].
    for rb in range(scale_inv.shape[0]):
        for cb in range(3):
            block = x[rb * block_rows:(rb + 1) * block_rows, cb * 128:(cb + 1) * 128]
            scaled = float(block.abs().max()) / float(scale_inv[rb, cb])
            assert 224.0 < scaled <= 448.0
    back = fp8.dequantize_blockwise(codes, scale_inv, "E4M3", block_rows)
    assert torch.equal(back, fp8.dequantize_blockwise(codes, scale_inv, "E4M3", block_rows))
    step = scale_inv.repeat_interleave(block_rows, 0)[:rows].repeat_interleave(128, 1)[:, :cols]
    assert torch.all((back - x).abs() <= torch.maximum(x.abs() * 2 ** -4, step * 2 ** -10))


def test_quantize_bad_input():
    with pytest.raises(ValueError, match="format: got 'E8M0'"):
        fp8.quantize(torch.ones(3), "E8M0", 1.0)
    with pytest.raises(TypeError, match="x: got dtype Long"):
        fp8.quantize(torch.ones(3, dtype=torch.int64), "E4M3", 1.0)
    with pytest.raises(ValueError, match="expected a 2-D tensor"):
        fp8.quantize_blockwise(torch.ones(3), "E4M3", 1)
    with pytest.raises(ValueError, match=r"scale_inv: got shape \[1, 1\], expected \[2, 1\]"):
        fp8.dequantize_blockwise(torch.zeros(2, 4, dtype=torch.uint8), torch.ones(1, 1), "E4M3", 1)


# --- delayed scaling's step boundary ------------------------------------------

def _reference_update(history, scale, fmt, margin, algo):
    """The rule in plain torch: amax from the history, scale kept on a bad amax."""
    amax = history.max(0).values if algo == "max" else history[0]
    new = fp8.format_max(fmt) / amax / 2.0 ** margin
    good = (amax > 0) & torch.isfinite(amax)
    new_scale = torch.where(good, new, scale)
    rolled = torch.cat([torch.zeros_like(history[:1]), history[:-1]])
    return rolled, new_scale


@pytest.mark.parametrize("algo", ["max", "most_recent"])
@pytest.mark.parametrize("fmt, margin", [("E4M3", 0), ("E5M2", 2)])
def test_delayed_scaling_update_matches_rule(algo, fmt, margin, gen):
    history = torch.rand(16, 5, generator=gen) * 10
    history[:, 3] = 0.0                      # a tensor that never saw a value
    history[0, 4] = float("inf")             # an overflow this step
    scale = torch.full((5,), 2.0)
    scale_inv = torch.empty(5)
    expected_history, expected_scale = _reference_update(history.clone(), scale.clone(), fmt,
                                                         margin, algo)
    fp8.update_delayed_scaling(history, scale, scale_inv, fmt, margin=margin,
                               amax_compute_algo=algo)
    assert torch.equal(history, expected_history)
    assert torch.allclose(scale, expected_scale, rtol=1e-6)
    assert torch.equal(scale_inv, 1.0 / scale)
    assert scale[3] == 2.0 and scale[4] == 2.0, "a zero or infinite amax keeps the previous scale"


def test_delayed_scaling_check_mode_names_the_tensor():
    history = torch.ones(4, 3)
    history[2, 1] = float("nan")
    scale, scale_inv = torch.ones(3), torch.ones(3)
    before = history.clone()
    with pytest.raises(ValueError, match="amax of tensor 1 is nan, expected a finite value"):
        fp8.update_delayed_scaling(history, scale, scale_inv, "E4M3", check_finite=True)
    assert torch.allclose(history, before, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(scale, torch.ones(3))


def test_delayed_scaling_bad_arguments():
    with pytest.raises(ValueError, match=r"scale / scale_inv: got shapes \[2\] and \[3\]"):
        fp8.update_delayed_scaling(torch.ones(4, 3), torch.ones(2), torch.ones(3), "E4M3")
    with pytest.raises(ValueError, match="amax_history: expected a contiguous float32 CPU tensor"):
        fp8.update_delayed_scaling(torch.ones(4, 3, dtype=torch.float64), torch.ones(3),
                                   torch.ones(3), "E4M3")


def test_blockwise_ops_read_block_major_activation_scales(gen):
    """ops.fp8_forward, fp8_dgrad and fp8_wgrad take the activations' 1x128
    block scales block-major (core/fp8/fp8_tensor.h): row-wise [ceil(C/128),
    T], column-wise [ceil(T/128) + G, C] with group g's blocks from block
    sum_{j<g} ceil(m_j/128). The CPU emulation against float64, every block
    its own scale so that a transposed read shows (float32 outputs: the
    emulation's float32 sums over K <= 272 stay within 1e-5); the K-major
    shape is refused, naming the argument and the shape expected."""
    from bench.fp8_throughput import columnwise
    from grouped_linear import ops
    t, k, n, splits = 300, 272, 144, [70, 0, 129, 101]
    groups, kb, nb = len(splits), -(-k // 128), -(-n // 128)
    bounds = [sum(splits[:g]) for g in range(groups + 1)]
    e4m3 = torch.float8_e4m3fn
    x = (torch.randn(t, k, generator=gen) * 4).to(e4m3)
    dy = (torch.randn(t, n, generator=gen) * 4).to(e4m3)
    w = (torch.randn(groups, n, k, generator=gen) * 4).to(e4m3)
    scales = lambda *shape: torch.rand(*shape, generator=gen) + 0.5  # noqa: E731
    sx, sdy, sw = scales(kb, t), scales(nb, t), scales(groups, nb, kb)
    xd = x.double() * sx.double().t().repeat_interleave(128, 1)[:, :k]
    dyd = dy.double() * sdy.double().t().repeat_interleave(128, 1)[:, :n]
    wd = w.double() * sw.double().repeat_interleave(128, 1).repeat_interleave(128, 2)[:, :n, :k]

    def close(got, want, what):
        err = float((got.double() - want).norm() / want.norm())
        assert err < 1e-5, f"{what}: relative error {err:.2e}"

    y = ops.fp8_forward(x, sx, w, sw, None, splits, out_dtype=torch.float32)
    close(y, torch.cat([xd[bounds[g]:bounds[g + 1]] @ wd[g].t() for g in range(groups)]), "fwd")
    w_t, sw_t = w.view(torch.uint8).transpose(1, 2).contiguous().view(e4m3), sw.transpose(1, 2)
    dx = ops.fp8_dgrad(dy, sdy, w_t, sw_t.contiguous(), splits, out_dtype=torch.float32)
    close(dx, torch.cat([dyd[bounds[g]:bounds[g + 1]] @ wd[g] for g in range(groups)]), "dgrad")

    # Column-wise: blocks of 128 rows restarting at each group's first row.
    capacity = -(-t // 128) + groups
    sdy_c, sx_c = scales(capacity, n), scales(capacity, k)
    block = torch.cat([torch.arange(m) // 128 + sum(-(-j // 128) for j in splits[:g])
                       for g, m in enumerate(splits)])
    dyd_c, xd_c = dy.double() * sdy_c.double()[block], x.double() * sx_c.double()[block]
    dw = ops.fp8_wgrad(columnwise(dy, splits), sdy_c, columnwise(x, splits), sx_c, splits, t,
                       out_dtype=torch.float32)
    want = torch.stack([dyd_c[bounds[g]:bounds[g + 1]].t() @ xd_c[bounds[g]:bounds[g + 1]]
                        for g in range(groups)])
    close(dw[[0, 2, 3]], want[[0, 2, 3]], "wgrad")
    assert torch.equal(dw[1], torch.zeros(n, k)), "wgrad: the empty group's gradient is zeros"

    with pytest.raises(ValueError, match=rf"inp_scale_inv: block scales must be a contiguous "
                                         rf"tensor of shape \[{kb}, {t}\]"):
        ops.fp8_forward(x, sx.t().contiguous(), w, sw, None, splits)
    with pytest.raises(ValueError, match=rf"grad_output_scale_inv: block scales must be a "
                                         rf"contiguous tensor of shape \[{capacity}, {n}\]"):
        ops.fp8_wgrad(columnwise(dy, splits), sdy_c.t().contiguous(), columnwise(x, splits), sx_c,
                      splits, t)
    assert torch.equal(ops.fp8_forward(x, sx, w, sw, None, splits, out_dtype=torch.float32), y)
