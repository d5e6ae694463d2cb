"""bench.split_probe on the CPU: its shapes, and that both timed products
are the one-group wgrad (the CPU engine runs the same calls the GPU probe
times; on the GPU, tests/python/test_sm90_kernels.py checks the split
itself against float64)."""

import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import split_probe  # noqa: E402


def test_shapes_parse_and_default_to_the_cases_and_small_weights():
    assert split_probe.parse_shapes("8192:256:512, 40:16:24") == [(8192, 256, 512), (40, 16, 24)]
    for bad in ("8192:256", "8192:256:x", "0:16:24"):
        with pytest.raises(SystemExit, match="--shapes: got"):
            split_probe.parse_shapes(bad)
    shapes = split_probe.default_shapes()
    assert (32768, 2048, 768) in shapes  # qwen3 fc2's rows as one group: the case that splits
    assert all(s in shapes for s in split_probe.EXTRA_SHAPES)
    assert len(shapes) == len(set(shapes))


def test_probe_names_bad_precisions():
    with pytest.raises(SystemExit, match="--precisions"):
        split_probe.main(["--precisions", "fp4"])


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_split_and_unsplit_are_the_same_wgrad(precision):
    T, N, K = 40, 16, 24
    fns = split_probe.products(T, N, K, precision, torch.device("cpu"))
    split, unsplit = fns["split"](), fns["unsplit"]()
    assert split.shape == unsplit.shape == (1, N, K)
    assert torch.isfinite(split.float()).all()
    torch.testing.assert_close(split, unsplit, rtol=0, atol=0)
    if precision == "bf16":
        ref = fns["dense"]().double()
        torch.testing.assert_close(split[0].double(), ref, rtol=2e-2, atol=2e-3)


def test_summary_line_gives_both_ratios_and_the_gain():
    line = split_probe.summary_line({"T": 8192, "N": 256, "K": 512, "precision": "fp8",
                                     "split_ms": 0.5, "unsplit_ms": 1.0,
                                     "split_ratio_to_dense": 0.8, "unsplit_ratio_to_dense": 0.4})
    assert "split 0.80" in line and "unsplit 0.40" in line and "(x2.00)" in line
