"""bench.targets on the CPU: each FP8 target's figure and verdict from
synthetic result records, and its place in BENCHMARKS.md's rendering."""

import json
import sys
from pathlib import Path

import pytest

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


# A GPU that copies at 2 TB/s (read + write) and fills at 1 TB/s.
PROBE = {"records": [{"copy_tb_per_s": 2.0, "fill_tb_per_s": 1.0},
                     {"copy_tb_per_s": 1.5, "fill_tb_per_s": 0.5}]}
BW = {"copy": 2.0e12, "fill": 1.0e12}


def _shaped(role, G, K, N, T, ours_ms, dense_ms):
    record = _gemm(f"{role}_case", G, role, ours_ms, dense_ms)
    record.update(K=K, N=N, T=T)
    return record


def test_gemm_bound_is_dense_over_the_memory_or_store_floor():
    # wgrad writes G*N*K bf16: 2 * 32 * 1000 * 1000 bytes = 64 MB, 64 us at
    # 1 TB/s; reads T*(N+K) = 2 MB; copy floor 66 MB / 2 TB/s = 33 us.
    wgrad = _shaped("wgrad", 32, 1000, 1000, 1000, 1.0, 0.032)
    assert abs(targets.gemm_bound(wgrad, "dense_fp8", BW) - 0.5) < 1e-9
    # fwd reads T*K + G*N*K = 33 MB, writes 2*T*N = 2 MB: 17.5 us at 2 TB/s.
    fwd = _shaped("fwd", 32, 1000, 1000, 1000, 1.0, 0.0105)
    assert abs(targets.gemm_bound(fwd, "dense_fp8", BW) - 0.6) < 1e-9
    # Dense slower than the floor: nothing but 1 bounds the ratio.
    assert targets.gemm_bound(_shaped("fwd", 8, 1000, 1000, 1000, 1.0, 1.0), "dense_fp8",
                              BW) == 1.0
    # No shapes (or no peer): no bound.
    assert targets.gemm_bound(_gemm("c", 8, "fwd", 1.0, 0.9), "dense_fp8", BW) is None
    assert targets.gemm_bound(wgrad, "dense_fp8_fast", BW) is None


def test_bound_column_with_a_store_probe_and_none_without():
    result = {"fp8_throughput": [_shaped("wgrad", 32, 1000, 1000, 1000, 1.0, 0.032)],
              "host_overhead": RESULT["host_overhead"]}
    plain = targets.target_rows(result)
    assert all(len(row) == len(targets.HEADER) for row in plain)
    rows = targets.target_rows(result, BW)
    (wgrad,) = _rows_by(rows, "FP8 GEMM wgrad, promoting (fp32 accumulation)", "32-128 experts")
    assert wgrad[3] == "0.03" and wgrad[5] == "0.50"
    assert all(row[5] == "-" for row in rows if row[0].startswith("host"))
    assert targets.render(result, BW).splitlines()[0].endswith("| bound (any kernel, this GPU) |")


def test_end_to_end_bound_is_roofline_s():
    # One dsv3-like record whose three GEMMs and step are all there.
    G, K, N, T = 32, 1000, 1000, 1000
    result = {"fp8_throughput": [_shaped(role, G, K, N, T, 1.0, 0.001)
                                 for role in ("fwd", "dgrad", "wgrad")],
              "fp8_end_to_end": [{"case": "dsv3_x", "routing": "uniform", "G": G, "K": K,
                                  "N": N, "T": T,
                                  "impls": {"bf16": {"median_ms": 1.0},
                                            "fp8_delayed": {"median_ms": 2.0,
                                                            "speedup_over_bf16": 0.5}}}]}
    for r in result["fp8_throughput"]:
        r["case"] = "dsv3_x"
    (expected,) = targets.roofline.end_to_end_bounds(result, BW)
    (row,) = [r for r in targets.target_rows(result, BW) if r[0] == "end to end, fp8_delayed"]
    assert row[5] == f"{expected['bound']:.2f}x"
    assert row[4] == "not met (0/1)"


def test_make_table_store_probe_adds_the_bounds_to_both_targets_tables(tmp_path):
    result = {"meta": {"commit": "abc"},
              "fp8_throughput": [_shaped("wgrad", 32, 1000, 1000, 1000, 1.0, 0.032)]}
    paths = {name: tmp_path / f"{name}.json" for name in ("result", "later", "probe")}
    paths["result"].write_text(json.dumps(result))
    paths["later"].write_text(json.dumps(dict(result, meta={"commit": "def"})))
    paths["probe"].write_text(json.dumps(PROBE))
    out = tmp_path / "B.md"
    assert make_table.main([str(paths["result"]), "--compare", str(paths["later"]),
                            "--store-probe", str(paths["probe"]), "--write", str(out)]) == 0
    text = out.read_text()
    assert text.count("| bound (any kernel, this GPU) |") == 2
    assert "### FP8 targets at this run" in text and "`probe.json`" in text
    # The probe's best copy and fill bandwidths (2 and 1 TB/s) made the bound.
    assert "| not met (0/1) | 0.50 |" in text


def test_make_table_takes_each_runs_bounds_from_the_probe_of_its_gpu(tmp_path):
    # Two re-runs on two GPU models, probes for one of them and for the base's:
    # each targets table names its own probe, the unprobed one has no bound.
    record = _shaped("wgrad", 32, 1000, 1000, 1000, 1.0, 0.032)
    runs = {"base": ("GPU A", "aaa"), "later_a": ("GPU A", "bbb"), "later_c": ("GPU C", "ccc")}
    args = []
    for name, (device, commit) in runs.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"meta": {"device": device, "commit": commit},
                                    "fp8_throughput": [record]}))
        args += [str(path)] if name == "base" else ["--compare", str(path)]
    slow = {"records": [{"copy_tb_per_s": 1.0, "fill_tb_per_s": 0.5}]}  # half of PROBE's
    for name, device, probe in (("probe_b", "GPU B", PROBE), ("probe_a", "GPU A", slow)):
        (tmp_path / f"{name}.json").write_text(json.dumps(dict(probe, device=device)))
        args += ["--store-probe", str(tmp_path / f"{name}.json")]
    out = tmp_path / "B.md"
    assert make_table.main(args + ["--write", str(out)]) == 0
    text = out.read_text()
    sections = text.split("## Re-run at ")
    assert [s.split("`")[1] for s in sections[1:]] == ["bbb", "ccc"]
    for section in sections[:2]:  # GPU A: probe_a's bandwidths, half of PROBE's: bound 0.25
        assert "`probe_a.json`" in section and "| not met (0/1) | 0.25 |" in section
    assert "probe_" not in sections[2] and "bound (any kernel" not in sections[2]
    assert "| target | cases | criterion | measured | verdict |" in sections[2]


@pytest.mark.parametrize("main", [targets.main, make_table.main], ids=["targets", "make_table"])
def test_main_refuses_an_unreadable_store_probe_and_works_after(main, tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(RESULT))
    assert main([str(path), "--store-probe", str(tmp_path / "missing.json")]) == 2
    assert "--store-probe" in capsys.readouterr().err
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"records": []}))
    assert main([str(path), "--store-probe", str(empty)]) == 2
    assert "no records" in capsys.readouterr().err
    # The same call without it still renders the targets.
    out = tmp_path / "t.md"
    write = "--write" if main is make_table.main else "--out"
    assert main([str(path), write, str(out)]) == 0
    assert "| target | cases | criterion | measured | verdict |" in out.read_text()


def test_make_table_refuses_an_unreadable_compare_and_writes_nothing(tmp_path, capsys):
    base, bad, out = tmp_path / "base.json", tmp_path / "bad.json", tmp_path / "B.md"
    base.write_text(json.dumps(RESULT))
    bad.write_text("{not json")
    for later in (bad, tmp_path / "missing.json"):
        assert make_table.main([str(base), "--compare", str(later), "--write", str(out)]) == 2
        assert f"--compare {later}" in capsys.readouterr().err
        assert not out.exists()
    # The same call with a readable later run renders both.
    good = tmp_path / "good.json"
    good.write_text(json.dumps(dict(RESULT, meta={"commit": "later"})))
    assert make_table.main([str(base), "--compare", str(good), "--write", str(out)]) == 0
    assert "## Re-run at `later`" in out.read_text()
