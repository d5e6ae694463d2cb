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


def _compare(tmp_path, base, later) -> str:
    """BENCHMARKS.md text of `base` with `later` compared beside it."""
    paths = []
    for name, result in (("base.json", base), ("later.json", later)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(result))
    out = tmp_path / "B.md"
    assert make_table.main([str(paths[0]), "--compare", str(paths[1]), "--write", str(out)]) == 0
    return out.read_text()


def test_compare_puts_a_later_runs_ratios_beside(tmp_path):
    base, later = _result(), _result()
    later["meta"]["commit"] = "def"
    later["throughput"][0]["impls"]["grouped_linear:sm90_grouped"]["ratio_to_dense"] = 0.75
    del later["throughput"][1]["impls"]["grouped_linear:sm90_grouped"]  # not measured later
    base["fp8_end_to_end"] = [{"case": "c1", "routing": "uniform", "impls": {
        "bf16": {"median_ms": 2.0}, "fp8_delayed": {"median_ms": 1.0, "speedup_over_bf16": 2.0}}}]
    later["fp8_end_to_end"] = [{"case": "c1", "routing": "uniform", "impls": {
        "bf16": {"median_ms": 2.2}, "fp8_delayed": {"median_ms": 1.1, "speedup_over_bf16": 2.0}}}]
    text = _compare(tmp_path, base, later)
    section = text[text.index("## Re-run at `def`"):]
    assert "| c1 | uniform | fwd | 0.80 | 0.75 | -0.05 |" in section
    assert "| c1 | uniform | wgrad | 0.50 | - | - |" in section
    assert "| c1 | uniform | fwd | 0.60 | 0.60 | +0.00 |" in section  # the FP8 table
    assert "| c1 | uniform | 2.000 → 2.200 | 1.000 (2.00x) → 1.100 (2.00x) |" in section
    # The tables of the base run come first, unchanged.
    assert text.index("## Throughput") < text.index("## Re-run at `def`")


def _host(case, mode, figures):
    return {"case": case, "G": 8, "mode": mode,
            "impls": {name: {"host_us": us, "gpu_us": us} for name, us in figures.items()}}


def test_compare_puts_a_later_runs_host_figures_beside(tmp_path):
    base, later = _result(), _result()
    later["meta"]["commit"] = "def"
    base["host_overhead"] = [_host("tiny_G8", "fwd_no_grad", {"grouped_linear": 12.0,
                                                              "loop_F.linear": 120.0})]
    later["host_overhead"] = [_host("tiny_G8", "fwd_no_grad", {"grouped_linear": 11.0,
                                                               "grouped_linear_fp8": 20.0,
                                                               "loop_F.linear": 130.0}),
                              _host("linear_16rows", "fwd_no_grad", {"torch.nn.Linear": 18.0})]
    section = _compare(tmp_path, base, later).split("### Host overhead (µs per call, before → now)")[1]
    # The Python loop peer is left out; a column the base run lacks shows "-";
    # the Linear case, with other implementations, gets a table of its own.
    assert "| case | G | mode | grouped_linear | grouped_linear_fp8 |" in section
    assert "| tiny_G8 | 8 | fwd (no_grad) | 12.0 → 11.0 | - → 20.0 |" in section
    assert "| case | G | mode | torch.nn.Linear |" in section
    assert "| linear_16rows | 8 | fwd (no_grad) | - → 18.0 |" in section


def test_host_ab_renders_both_builds_and_their_ratio(tmp_path):
    ab = {"builds": {"before": "/a", "after": "/b"}, "rounds": 4, "batches": 5, "calls": 200,
          "records": [{"case": "tiny_G8", "mode": "fwd_bwd", "impl": "grouped_linear_fp8_delayed",
                       "host_us": {"before": 200.0, "after": 150.0}, "ratio": 0.75}]}
    ab_path = tmp_path / "ab.json"
    ab_path.write_text(json.dumps(ab))
    result_path = tmp_path / "run.json"
    result_path.write_text(json.dumps(_result()))
    out = tmp_path / "B.md"
    assert make_table.main([str(result_path), "--host-ab", str(ab_path), "--write", str(out)]) == 0
    text = out.read_text()
    assert "4 rounds, each a median of 5 batches of 200 calls" in text
    assert "Builds: before: /a; after: /b." in text
    assert "| case | mode | implementation | before | after | after / before |" in text
    assert "| tiny_G8 | fwd+bwd | grouped_linear_fp8_delayed | 200 | 150 | 0.75 |" in text


def test_tuning_table_keeps_fp8_kernels_and_tile_orders_apart():
    """Kernels that share a last name part (two _widestore wgrads) or differ
    only in tile order get columns of their own."""
    tune = {"records": [{"case": "c", "routing": "skewed", "role": "wgrad", "kernels": {
        "wgrad_e5m2_bf16_halfcoop128x256_widestore@along_m": {"ratio_to_dense": 0.57},
        "wgrad_e5m2_bf16_halfcoop128x256_widestore@along_n": {"ratio_to_dense": 0.71},
        "wgrad_e4m3_bf16_block_coop128x128_widestore@along_m": {"ratio_to_dense": 0.50}}}]}
    header, rows, _ = make_table.tuning_table(tune)
    assert header[3:] == ["bf16_halfcoop128x256_widestore@along_m",
                          "bf16_halfcoop128x256_widestore@along_n",
                          "bf16_block_coop128x128_widestore@along_m"]
    assert rows[0][3:] == ["0.57", "**0.71**", "0.50"]
    assert make_table.tuning_config("wgrad_bf16_coop256x128") == "coop256x128"
