"""The FP8 throughput section's blockwise rows, on the CPU: the block-scaled
products it times get operands and scales in the layouts our ops take (the
CPU runs them through the emulation; each result checked against a float64
product of the dequantized operands), and each ratio is taken against the
dense peer of the same scaling, or not at all."""

import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import fp8_throughput  # noqa: E402
from bench.cases import ThroughputCase, make_splits  # noqa: E402

E4M3 = torch.float8_e4m3fn
CASE = ThroughputCase("tiny_block", G=3, K=256, N=160, T=300)


def _expand_rows(scales, blocks_of):
    """Block-major [ceil(C/128), R] -> [R, C]: each scale over its 128 columns."""
    return scales.double().t().repeat_interleave(128, dim=1)[:, :blocks_of]


def _dequantized_weight(codes, scales):
    g, n, k = codes.shape
    full = scales.double().repeat_interleave(128, 1).repeat_interleave(128, 2)[:, :n, :k]
    return codes.double() * full


@pytest.mark.parametrize("role", ["fwd", "dgrad", "wgrad"])
def test_block_products_match_float64(role, monkeypatch):
    T, K, N, G = CASE.T, CASE.K, CASE.N, CASE.G
    splits = make_splits("skewed", G, T)
    gen = torch.Generator().manual_seed(3)
    xq = torch.randn(T, K, generator=gen).to(E4M3)
    wq = torch.randn(G, N, K, generator=gen).to(E4M3)
    dy = torch.randn(T, N, generator=gen).to(E4M3)
    wq_t = wq.transpose(1, 2).contiguous()
    xq_t, dy_t = fp8_throughput.columnwise(xq, splits), fp8_throughput.columnwise(dy, splits)
    made = {}
    real_scales = fp8_throughput._scales

    def recording_scales(shape, device, g):
        made[len(made)] = real_scales(shape, device, g)
        return made[len(made) - 1]

    monkeypatch.setattr(fp8_throughput, "_scales", recording_scales)
    out = fp8_throughput.block_product(role, CASE, xq, wq, wq_t, dy, xq_t, dy_t, splits,
                                       torch.device("cpu"))().double()
    bounds = [0]
    for m in splits:
        bounds.append(bounds[-1] + m)
    if role == "fwd":
        x = xq.double() * _expand_rows(made[0], K)
        w = _dequantized_weight(wq, made[1])
        ref = torch.cat([x[bounds[g]:bounds[g + 1]] @ w[g].t() for g in range(G)])
    elif role == "dgrad":
        d = dy.double() * _expand_rows(made[0], N)
        w_t = _dequantized_weight(wq_t, made[1])  # [G, K, N]
        ref = torch.cat([d[bounds[g]:bounds[g + 1]] @ w_t[g].t() for g in range(G)])
    else:
        # Column-wise scales, block-major [capacity, C]: group g's 1 x 128
        # blocks from block sum_{j<g} ceil(m_j / 128), restarting at the
        # group's first row.
        sdy_t, sx_t = made[0].double(), made[1].double()
        ref = torch.zeros(G, N, K, dtype=torch.float64)
        first_block = 0
        for g, m in enumerate(splits):
            block = torch.arange(m) // 128 + first_block
            d = dy[bounds[g]:bounds[g + 1]].double() * sdy_t[block]
            x = xq[bounds[g]:bounds[g + 1]].double() * sx_t[block]
            ref[g] = d.t() @ x
            first_block += -(-m // 128)
    assert out.shape == ref.shape
    err = (out - ref).norm() / ref.norm()
    assert err < 1e-2, f"{role}: relative error {err:.2e} (bf16 output: under 1e-2)"


def test_block_ratio_uses_the_block_peer_only():
    impls = {"grouped_linear:fp8": {"tflops": 50.0},
             "grouped_linear:fp8_fast": {"tflops": 60.0},
             "grouped_linear:fp8_block": {"tflops": 40.0},
             "dense_fp8": {"tflops": 100.0}, "dense_fp8_fast": {"tflops": 120.0},
             "dense_fp8_block": {"tflops": 80.0}}
    fp8_throughput.add_ratios_fp8(impls)
    assert impls["grouped_linear:fp8"]["ratio_to_dense"] == pytest.approx(0.5)
    assert impls["grouped_linear:fp8_fast"]["ratio_to_dense"] == pytest.approx(0.5)
    assert impls["grouped_linear:fp8_block"]["ratio_to_dense"] == pytest.approx(0.5)
    impls = {"grouped_linear:fp8_block": {"tflops": 40.0}, "dense_fp8": {"tflops": 100.0},
             "dense_fp8_block": {"error": "unsupported: no scaled_mm"}}
    fp8_throughput.add_ratios_fp8(impls)
    assert "ratio_to_dense" not in impls["grouped_linear:fp8_block"]
