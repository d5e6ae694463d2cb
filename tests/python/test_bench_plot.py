"""The benchmark's plot and table links: drawn from a result JSON (a small
synthetic one here), a real PNG, linked from the Markdown table."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import make_table, plot  # noqa: E402


def _result():
    def row(case, role, ratios):
        return {"case": case, "routing": "uniform", "role": role, "G": 8,
                "impls": {name: {"ratio_to_dense": r, "tflops": 100 * r, "median_ms": 1.0}
                          for name, r in ratios.items()}}
    return {
        "meta": {"device": "test device", "torch": "x", "commit": "abc", "date": "today"},
        "throughput": [row("c1", "fwd", {"grouped_linear:sm90_grouped": 0.8, "grouped_mm": 0.7,
                                         "dense": 1.0}),
                       row("c1", "wgrad", {"grouped_linear:sm90_grouped": 0.5, "dense": 1.0})],
        "fp8_throughput": [row("c1", "fwd", {"grouped_linear:fp8": 0.6, "dense_fp8": 1.0})],
    }


def test_plot_writes_a_png_and_the_table_links_it(tmp_path):
    pytest.importorskip("matplotlib")
    result_path = tmp_path / "run.json"
    result_path.write_text(json.dumps(_result()))
    out = plot.draw(_result(), result_path.with_suffix(".png"))
    assert out == result_path.with_suffix(".png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    markdown = tmp_path / "BENCHMARKS.md"
    assert make_table.main([str(result_path), "--write", str(markdown)]) == 0
    assert "![ratios to dense, every role and case](run.png)" in markdown.read_text()


def test_plot_without_throughput_draws_nothing(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert plot.draw({"meta": {}}, tmp_path / "x.png") is None
    assert not (tmp_path / "x.png").exists()
    assert "no throughput section" in capsys.readouterr().err


def test_plot_bars_take_missing_ratios_as_zero():
    labels, values = plot._bars(_result()["throughput"], ["grouped_mm", "grouped_linear:sm90_grouped"])
    assert labels == ["c1\nunif fwd", "c1\nunif wgrad"]
    assert values == [[0.7, 0.0], [0.8, 0.5]]
