"""FP8 helpers of the tests: the values a module's FP8 products multiply,
recomputed independently with the CPU quantization reference
(`grouped_linear.fp8.quantize*`), and the error bounds against unquantized
references.

Tolerances, two kinds:

* Against a float64 reference computed on the SAME dequantized values
  (`dequantized_operands`): only the product's own arithmetic remains, fp32
  accumulation and one rounding of the result to the output dtype, exactly
  as in the unquantized tests, so conftest.TOLERANCE applies unchanged
  (float32 1e-5, bfloat16 1e-2). Quantizing with a wrong scale, format, block
  or group gives errors of order 2^-4 or more and fails these.

* Against the unquantized float64 reference (`fp8_bound`): an FP8 value has
  a relative step of 2^-3 (E4M3, 3 fraction bits) or 2^-2 (E5M2, 2 bits);
  rounding to nearest errs by at most half a step, u = 2^-4 or 2^-3, for
  values in the normal range. Each term x_k * w_k of a product then carries a
  relative error of at most u_a + u_b (+ u_a u_b); the bound is that sum,
  u_a + u_b + u_a u_b, plus the output dtype's own tolerance. Norm-wise, over
  many terms of random sign, the error is near its RMS value
  sqrt((u_a^2 + u_b^2) / 3), 2 to 3 times below the bound (measured: 0.02 to
  0.05), while a wrong group, operand or saturated scale gives order 1.
"""

import math
from typing import Dict, List, Optional, Sequence

import torch

from conftest import TOLERANCE
from grouped_linear import fp8

FORMAT_STEP = {"E4M3": 2.0 ** -3, "E5M2": 2.0 ** -2}

# float32 results of the FP8 GEMM kernels (wgrad into main_grad or a float32
# weight): inside each 128-deep k-block the tensor core adds FP8 products at
# a reduced accumulator width (about 13 mantissa bits) before the kernel
# promotes the partial sum into fp32 registers, so the error is near 2^-13
# per k-block, not fp32's 2^-24 (test_sm90_fp8_kernels). Measured on the H200:
# up to 1.3e-4 relative for reductions of 200 to 500 rows.
FP8_FP32_TOLERANCE = 3e-4


def fp8_bound(fmt_a: str, fmt_b: str, dtype: torch.dtype) -> float:
    u_a, u_b = FORMAT_STEP[fmt_a] / 2, FORMAT_STEP[fmt_b] / 2
    return u_a + u_b + u_a * u_b + TOLERANCE[dtype]


def formats(recipe):
    native = recipe.to_native()
    return native.forward_format, native.backward_format


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", torch.float32).contiguous()


def _inverse(scale: float) -> float:
    """1 / scale in float32 arithmetic, as the library computes scale_inv."""
    return float(torch.tensor(1.0, dtype=torch.float32) / torch.tensor(scale, dtype=torch.float32))


def per_tensor(x: torch.Tensor, fmt: str, scale: float) -> torch.Tensor:
    """The values one per-tensor cast stands for: from_fp8(to_fp8(x * s)) / s."""
    xf = _f32(x)
    if xf.numel() == 0:
        return xf
    return fp8.dequantize(fp8.quantize(xf, fmt, scale), fmt, _inverse(scale))


def current_scale(x: torch.Tensor, fmt: str) -> float:
    """Current scaling: the scale from this tensor's own amax (margin 0)."""
    xf = _f32(x)
    amax = float(xf.abs().max()) if xf.numel() else 0.0
    return fp8.scale_from_amax(amax, fmt, 0, 1.0, False)


def blocks_along_rows(x2d: torch.Tensor, fmt: str, block_rows: int) -> torch.Tensor:
    """Blockwise cast of a matrix (block_rows x 128 tiles, power-of-two scales)."""
    xf = _f32(x2d)
    if xf.numel() == 0:
        return xf
    codes, scale_inv = fp8.quantize_blockwise(xf, fmt, block_rows, 128, True)
    return fp8.dequantize_blockwise(codes, scale_inv, fmt, block_rows, 128)


def blocks_along_groups(x2d: torch.Tensor, splits: Sequence[int], fmt: str) -> torch.Tensor:
    """The column-wise copy's 1 x 128 blocks: along each group's rows,
    restarting at the group's first row."""
    xf = _f32(x2d)
    out = torch.empty_like(xf)
    row = 0
    for m in splits:
        if m:
            out[row:row + m] = blocks_along_rows(xf[row:row + m].T.contiguous(), fmt, 1).T
        row += m
    return out


def dequantized_operands(recipe, x2d, w3d, dy2d, splits: Sequence[int],
                         scale_fwd: Optional[torch.Tensor] = None,
                         scale_bwd: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
    """float32 values of each copy the products read:
    x_row (forward), x_col (wgrad), w (forward and dgrad), dy_row (dgrad),
    dy_col (wgrad). Delayed scaling reads the module's scales (the values
    before the forward / before the backward)."""
    fwd, bwd = formats(recipe)
    groups = w3d.shape[0]
    out = {}
    if isinstance(recipe, fp8.Float8BlockScaling):
        out["x_row"] = blocks_along_rows(x2d, fwd, 1)
        out["x_col"] = blocks_along_groups(x2d, splits, fwd)
        out["w"] = torch.stack([blocks_along_rows(w3d[g], fwd, 128) for g in range(groups)])
        if dy2d is not None:
            out["dy_row"] = blocks_along_rows(dy2d, bwd, 1)
            out["dy_col"] = blocks_along_groups(dy2d, splits, bwd)
        return out
    if isinstance(recipe, fp8.DelayedScaling):
        sx = float(scale_fwd[0])
        sw = [float(scale_fwd[1 + g]) for g in range(groups)]
        sdy = float(scale_bwd[0]) if scale_bwd is not None else None
    else:
        sx = current_scale(x2d, fwd)
        sw = [current_scale(w3d[g], fwd) for g in range(groups)]
        sdy = current_scale(dy2d, bwd) if dy2d is not None else None
    out["x_row"] = out["x_col"] = per_tensor(x2d, fwd, sx)
    out["w"] = torch.stack([per_tensor(w3d[g], fwd, sw[g]) for g in range(groups)])
    if dy2d is not None:
        out["dy_row"] = out["dy_col"] = per_tensor(dy2d, bwd, sdy)
    return out


def amax(t: torch.Tensor) -> float:
    t = _f32(t)
    return float(t.abs().max()) if t.numel() else 0.0


def expected_delayed_scale(history: torch.Tensor, fmt: str, margin: int, algo: str,
                           previous: torch.Tensor) -> torch.Tensor:
    """The scale rule of delayed scaling, in plain torch (float32)."""
    a = history.max(0).values if algo == "max" else history[0]
    new = torch.tensor(fp8.format_max(fmt), dtype=torch.float32) / a / 2.0 ** margin
    good = (a > 0) & torch.isfinite(a)
    return torch.where(good, new, previous)


def relative(x: float, y: float) -> float:
    return abs(x - y) / max(abs(y), 1e-30)


def splits_like(splits: List[int], form: str, device):
    if form == "list":
        return list(splits)
    if form == "cpu_tensor":
        return torch.tensor(splits, dtype=torch.int64)
    if form == "device_tensor":
        return torch.tensor(splits, dtype=torch.int32, device=device)
    raise ValueError(form)


def assert_finite_rel_le(err: float, bound: float, what: str):
    assert math.isfinite(err) and err <= bound, f"{what}: relative error {err:.3e} > {bound:.3e}"
