"""bench.roofline on the CPU: the bytes each role moves at least, the floors
and attainable ratios from a result and a store probe, and its refusals."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import roofline  # noqa: E402


def test_traffic_counts_each_operand_once():
    G, K, N, T = 4, 256, 512, 1000
    assert roofline.traffic_bytes("fwd", G, K, N, T) == {"read": T * K + G * N * K,
                                                         "write": 2 * T * N}
    assert roofline.traffic_bytes("dgrad", G, K, N, T) == {"read": T * N + G * N * K,
                                                           "write": 2 * T * K}
    assert roofline.traffic_bytes("wgrad", G, K, N, T) == {"read": T * N + T * K,
                                                           "write": 2 * G * N * K}
    with pytest.raises(ValueError, match="role 'bwd'"):
        roofline.traffic_bytes("bwd", G, K, N, T)


def _record(role, dense_ms, ours):
    return {"case": "c", "routing": "uniform", "role": role, "G": 8, "K": 1000, "N": 2000,
            "T": 4000, "impls": {"dense_fp8": {"median_ms": dense_ms},
                                 "grouped_linear:fp8": {"ratio_to_dense": ours}}}


def test_floors_and_attainable_ratios():
    bw = {"copy": 4e12, "fill": 2e12}
    result = {"fp8_throughput": [_record("fwd", 0.01, 0.9), _record("wgrad", 0.01, 0.3),
                                 {"role": "fwd", "impls": {}}]}  # no dense peer: left out
    fwd, wgrad = roofline.floors(result, bw)
    # fwd: 4e6 + 16e6 read, 16e6 written = 36e6 bytes at 4e12 B/s = 9 us.
    assert fwd["memory_floor_ms"] == pytest.approx(0.009)
    assert fwd["attainable"] == 1.0 and fwd["ours"] == 0.9
    # wgrad: 8e6 + 4e6 read, 32e6 written: memory 11 us; store 32e6 / 2e12 = 16 us.
    assert wgrad["memory_floor_ms"] == pytest.approx(0.011)
    assert wgrad["store_floor_ms"] == pytest.approx(0.016)
    assert wgrad["attainable"] == pytest.approx(0.01 / 0.016)
    text = roofline.render([fwd, wgrad], bw)
    assert "copy 4.00 TB/s, fill 2.00 TB/s" in text and "0.48" in text  # 0.3 / 0.625


def test_main_writes_the_table_and_refuses_empty_input(tmp_path, capsys):
    result, probe = tmp_path / "r.json", tmp_path / "p.json"
    result.write_text(json.dumps({"fp8_throughput": [_record("dgrad", 0.02, 0.8)]}))
    probe.write_text(json.dumps({"records": [{"copy_tb_per_s": 4.0, "fill_tb_per_s": 3.0},
                                             {"copy_tb_per_s": 4.2, "fill_tb_per_s": 3.3}]}))
    out = tmp_path / "t.txt"
    assert roofline.main([str(result), str(probe), "--out", str(out)]) == 0
    assert "copy 4.20 TB/s, fill 3.30 TB/s" in out.read_text()
    probe.write_text(json.dumps({"records": []}))
    assert roofline.main([str(result), str(probe)]) == 2
    assert "holds no records" in capsys.readouterr().err
    probe.write_text(json.dumps({"records": [{"copy_tb_per_s": 4.0, "fill_tb_per_s": 3.0}]}))
    result.write_text(json.dumps({"throughput": []}))
    assert roofline.main([str(result), str(probe)]) == 2
    assert "no FP8 throughput records" in capsys.readouterr().err


def test_end_to_end_bound_adds_cast_and_gemm_floors():
    bw = {"copy": 4e12, "fill": 2e12}
    # Dense 0.01 ms a role; the floors: fwd 9 us, dgrad (T*N + G*N*K read,
    # 2*T*K written: 8e6 + 16e6 + 8e6) 8 us, wgrad's store 16 us.
    gemms = [_record(role, 0.01, 0.5) for role in ("fwd", "dgrad", "wgrad")]
    e2e = {"case": "c", "routing": "uniform", "G": 8, "K": 1000, "N": 2000, "T": 4000,
           "impls": {"bf16": {"median_ms": 0.2},
                     "fp8_delayed": {"median_ms": 0.19, "speedup_over_bf16": 1.05},
                     "fp8_current": {"median_ms": 0.25, "speedup_over_bf16": 0.8},
                     "fp8_delayed_cached_weights": {"median_ms": 0.1,
                                                    "speedup_over_bf16": 2.0}}}
    rows = {r["step"]: r for r in roofline.end_to_end_bounds(
        {"fp8_throughput": gemms, "fp8_end_to_end": [e2e]}, bw)}
    assert set(rows) == {"fp8_delayed", "fp8_current", "fp8_delayed_cached_weights"}
    gemm_ms = 0.01 + 0.01 + 0.016  # max(dense, floor) per role
    # Casts: X 4e6 and dY 8e6 elements, W 16e6; 4 bytes each (6 when current).
    delayed, current, cached = (rows["fp8_delayed"], rows["fp8_current"],
                                rows["fp8_delayed_cached_weights"])
    assert delayed["gemm_floor_ms"] == pytest.approx(gemm_ms)
    assert delayed["cast_floor_ms"] == pytest.approx(28e6 * 4 / 4e12 * 1e3)
    assert current["cast_floor_ms"] == pytest.approx(28e6 * 6 / 4e12 * 1e3)
    assert cached["cast_floor_ms"] == pytest.approx(12e6 * 4 / 4e12 * 1e3)
    assert delayed["bound"] == pytest.approx(0.2 / (0.028 + gemm_ms))
    assert cached["bound"] > delayed["bound"] > current["bound"]
    assert delayed["ours"] == 1.05
    text = roofline.render_end_to_end(list(rows.values()))
    assert "fp8_delayed_cached_weights" in text and f"{delayed['bound']:6.2f}" in text
    # A record without all three GEMMs of its case and routing has no bound.
    assert roofline.end_to_end_bounds({"fp8_throughput": gemms[:2],
                                       "fp8_end_to_end": [e2e]}, bw) == []


def test_blockwise_step_also_gets_the_bound_of_cublas_blockwise_gemms():
    bw = {"copy": 4e12, "fill": 2e12}
    gemms = [_record(role, 0.01, 0.5) for role in ("fwd", "dgrad", "wgrad")]
    for g, block_ms in zip(gemms, (0.02, 0.005, 0.03)):  # dgrad's: below its 8 us floor
        g["impls"]["dense_fp8_block"] = {"median_ms": block_ms}
    e2e = {"case": "c", "routing": "uniform", "G": 8, "K": 1000, "N": 2000, "T": 4000,
           "impls": {"bf16": {"median_ms": 0.2},
                     "fp8_block": {"median_ms": 0.25, "speedup_over_bf16": 0.8},
                     "fp8_delayed": {"median_ms": 0.19, "speedup_over_bf16": 1.05}}}
    rows = {r["step"]: r for r in roofline.end_to_end_bounds(
        {"fp8_throughput": gemms, "fp8_end_to_end": [e2e]}, bw)}
    block, delayed = rows["fp8_block"], rows["fp8_delayed"]
    # The hardware bound is the per-tensor one; the peer's takes max(peer, floor) a role.
    assert block["bound"] == pytest.approx(delayed["bound"])
    assert block["block_peer_bound"] == pytest.approx(0.2 / (0.028 + 0.02 + 0.008 + 0.03))
    assert "block_peer_bound" not in delayed
    text = roofline.render_end_to_end([block, delayed])
    assert "block peer" in text and f"{block['block_peer_bound']:10.2f}" in text
    # Without the peer for every role: no such figure.
    del gemms[2]["impls"]["dense_fp8_block"]
    rows = roofline.end_to_end_bounds({"fp8_throughput": gemms, "fp8_end_to_end": [e2e]}, bw)
    assert all("block_peer_bound" not in r for r in rows)
