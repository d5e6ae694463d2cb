"""bench.targets on the CPU: each FP8 target's figure and verdict from
synthetic result records, and its place in BENCHMARKS.md's rendering."""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import make_table, targets  # noqa: E402


def _timing(ms):
    return {"median_ms": ms, "tflops": 1.0 / ms}


def _gemm(case, G, role, ours_ms, dense_ms, fast_ms=None, dense_fast_ms=None):
    impls = {"grouped_linear:fp8": _timing(ours_ms), "dense_fp8": _timing(dense_ms)}
    if fast_ms is not None:
        impls["grouped_linear:fp8_fast"] = _timing(fast_ms)
        impls["dense_fp8_fast"] = _timing(dense_fast_ms)
    return {"case": case, "G": G, "role": role, "routing": "uniform", "impls": impls}


def _host(G, mode, fp8_us, floor_us):
    return {"case": f"tiny_G{G}", "G": G, "mode": mode,
            "impls": {"grouped_linear_fp8_delayed": {"host_us": fp8_us},
                      "autograd_floor": {"host_us": floor_us}}}


RESULT = {
    "fp8_throughput": [
        _gemm("mixtral_fc1", 8, "fwd", 1.0, 0.9),            # 0.90: meets 0.85
        _gemm("mixtral_fc2", 8, "fwd", 1.0, 0.8, 1.0, 0.9),  # 0.80 misses; fast 0.90
        _gemm("qwen3_30b_fc1", 128, "wgrad", 1.0, 0.35),
        {"case": "broken", "G": 32, "role": "fwd", "error": "OOM"},  # no impls: left out
    ],
    "fp8_end_to_end": [
        {"case": "dsv3_ep8_fc1", "routing": "uniform",
         "impls": {"bf16": {"median_ms": 1.0, "speedup_over_bf16": 1.0},
                   "fp8_delayed": {"median_ms": 1.1, "speedup_over_bf16": 0.9}}},
        {"case": "mixtral_fc1", "routing": "uniform",
         "impls": {"fp8_delayed": {"median_ms": 1.0, "speedup_over_bf16": 1.6}}},
        {"case": "mixtral_fc2", "routing": "uniform",
         "impls": {"fp8_delayed": {"median_ms": 1.0, "speedup_over_bf16": 1.55}}},
    ],
    "host_overhead": [_host(8, "fwd_no_grad", 20.0, 2.0), _host(128, "fwd_no_grad", 24.0, 1.0),
                      _host(8, "fwd_bwd", 100.0, 30.0), _host(128, "fwd_bwd", 90.0, 28.0)],
}


def _rows_by(rows, target, cases):
    return [r for r in rows if r[0] == target and r[1] == cases]


def test_gemm_rows_count_each_case_against_its_dense_peer():
    rows = targets.gemm_rows(RESULT["fp8_throughput"])
    (fwd8,) = _rows_by(rows, "FP8 GEMM fwd, promoting (fp32 accumulation)", "8 experts")
    assert fwd8[3] == "0.80-0.90" and fwd8[4] == "not met (1/2)"
    (fast8,) = _rows_by(rows, "FP8 GEMM fwd, fast accumulation", "8 experts")
    assert fast8[2] == ">= 0.85 of `dense_fp8_fast`" and fast8[3] == "0.90" and fast8[4] == "met"
    (wgrad,) = _rows_by(rows, "FP8 GEMM wgrad, promoting (fp32 accumulation)", "32-128 experts")
    assert wgrad[3] == "0.35" and wgrad[4] == "not met (0/1)"
    # No record for the other roles and buckets: no row claims them.
    assert not _rows_by(rows, "FP8 GEMM dgrad, promoting (fp32 accumulation)", "8 experts")


def test_verdict_uses_the_unrounded_ratio():
    rows = targets.gemm_rows([_gemm("c", 8, "dgrad", 1.0, 0.8496)])
    assert rows[0][3] == "0.85" and rows[0][4] == "not met (0/1)"


def test_end_to_end_rows_per_recipe_and_model():
    rows = targets.end_to_end_rows(RESULT["fp8_end_to_end"])
    assert ["end to end, fp8_delayed", "dsv3", ">= 1.5x our bf16", "0.90x",
            "not met (0/1)"] in rows
    assert ["end to end, fp8_delayed", "mixtral", ">= 1.5x our bf16", "1.55-1.60x",
            "met"] in rows
    assert not any(r[0] == "end to end, bf16" for r in rows)


def test_host_rows_name_every_g_and_the_autograd_floor():
    rows = targets.host_rows(RESULT["host_overhead"])
    (fwd,) = [r for r in rows if r[0] == "host, forward"]
    assert fwd[1] == "fp8_delayed" and fwd[4] == "met"
    assert "20.0-24.0 us over G = 8, 128; max/min 1.20" == fwd[3]
    (both,) = [r for r in rows if r[0] == "host, forward+backward"]
    assert both[4] == "not met (0/2)" and "torch's autograd floor 28.0-30.0 us" in both[3]


def test_make_table_places_the_targets_before_the_throughput(tmp_path):
    text = make_table.render(RESULT)
    assert "## FP8 targets (issue 4)" in text
    assert text.index("## FP8 targets (issue 4)") < text.index("## FP8 throughput")
    assert "| FP8 GEMM wgrad, promoting (fp32 accumulation) | 32-128 experts |" in text
    # A result without FP8 or host records has no targets section.
    assert "FP8 targets" not in make_table.render({"throughput": []})


def test_main_writes_the_table_and_refuses_a_result_without_records(tmp_path, capsys):
    path, out = tmp_path / "r.json", tmp_path / "t.md"
    path.write_text(json.dumps(RESULT))
    assert targets.main([str(path), "--out", str(out)]) == 0
    assert out.read_text().startswith("| target | cases | criterion | measured | verdict |")
    path.write_text(json.dumps({"throughput": []}))
    assert targets.main([str(path)]) == 2
    assert "holds no FP8 throughput" in capsys.readouterr().err
