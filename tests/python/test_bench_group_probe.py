"""bench.group_probe on the CPU: the five ways it splits a case's rows, and
that each product it times is the grouped product of that splitting (the
CPU engine runs the same calls the GPU probe times)."""

import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import group_probe  # noqa: E402
from bench.cases import ThroughputCase  # noqa: E402


@pytest.mark.parametrize("G,T", [(128, 32768), (32, 8192), (8, 16384), (3, 40)])
def test_splittings_keep_the_groups_and_fill_as_named(G, T):
    s = group_probe.splittings(G, T)
    assert list(s) == list(group_probe.SPLITTINGS)
    assert s["one_group"] == [T]
    for name in ("uniform", "skewed", "skewed_tiles", "uniform_64"):
        assert len(s[name]) == G, name
    assert sum(s["uniform"]) == sum(s["skewed"]) == T
    assert all(m % 128 == 0 and m >= k for m, k in zip(s["skewed_tiles"], s["skewed"]))
    assert group_probe.row_fill(s["skewed_tiles"]) == 1.0
    if T // G % 128 == 0:  # the benchmark's cases: uniform groups are whole tiles
        assert group_probe.row_fill(s["uniform"]) == 1.0
        # every group's last tile half empty
        assert group_probe.row_fill(s["uniform_64"]) == pytest.approx(1 - 64 / (T // G))


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("role", ["fwd", "dgrad", "wgrad"])
def test_each_timed_product_is_the_grouped_product_of_its_splitting(precision, role):
    case = ThroughputCase("tiny", G=3, K=32, N=16, T=40)
    fns = group_probe.products(case, precision, role, torch.device("cpu"))
    for name, splits in group_probe.splittings(case.G, case.T).items():
        out = fns["ours"](splits)()
        if role == "wgrad":
            assert out.shape == (len(splits), case.N, case.K), name
        else:
            width = case.N if role == "fwd" else case.K
            assert out.shape == (sum(splits), width), name
        assert torch.isfinite(out.float()).all(), name
        if precision == "bf16":  # against per-group products of the probe's operands
            operands = fns["operands"]
            row, parts = 0, []
            for g, m in enumerate(splits):
                x = operands["x"][row:row + m].double()
                dy = operands["dy"][row:row + m].double()
                w = operands["w"][g].double()
                parts.append({"fwd": x @ w.t(), "dgrad": dy @ w, "wgrad": (dy.t() @ x)[None]}[role])
                row += m
            torch.testing.assert_close(out.double(), torch.cat(parts), rtol=2e-2, atol=2e-3)
        elif role == "wgrad":  # FP8: a group with no rows has a zero gradient
            for g, m in enumerate(splits):
                if m == 0:
                    assert torch.count_nonzero(out[g]) == 0, name


def test_group_probe_names_bad_roles_and_precisions():
    with pytest.raises(SystemExit, match="--roles"):
        group_probe.main(["--roles", "wgrad_main_grad"])
    with pytest.raises(SystemExit, match="--precisions"):
        group_probe.main(["--precisions", "fp4"])


@pytest.mark.skipif(not (torch.cuda.is_available() and group_probe.grouped_linear.with_cuda
                         and torch.cuda.get_device_capability() == (9, 0)),
                    reason="needs an sm_90 GPU and a CUDA build")
def test_group_probe_names_an_unknown_kernel():
    with pytest.raises(SystemExit, match="--kernel: got 'no_such_kernel'"):
        group_probe.main(["--kernel", "no_such_kernel", "--cases", "qwen3_30b_fc1"])


def test_group_probe_names_bad_splittings_and_tile_orders():
    with pytest.raises(SystemExit, match="--splittings"):
        group_probe.main(["--splittings", "one_group,halves"])
    with pytest.raises(SystemExit, match="--tile-orders"):
        group_probe.main(["--tile-orders", "auto,diagonal"])


def test_tile_order_block_restores_the_automatic_order(monkeypatch):
    calls = []
    monkeypatch.setattr(group_probe.ops, "set_tile_order", lambda *a: calls.append(a))
    with group_probe.tile_order("auto"):
        pass
    with pytest.raises(RuntimeError):
        with group_probe.tile_order("along_n"):
            raise RuntimeError("a failed launch")
    engine = group_probe.ENGINE
    assert calls == [("cuda", engine, ""), ("cuda", engine, ""),
                     ("cuda", engine, "along_n"), ("cuda", engine, "")]


def test_summary_line_shows_the_factors_of_the_splittings_that_ran():
    def record(ratios, order="auto"):
        return {"case": "c", "precision": "fp8", "role": "fwd", "tile_order": order,
                "dense_tflops": 1000.0,
                "splittings": {k: {"ratio_to_dense": v, "row_fill": 0.5} for k, v in ratios.items()}}
    line = group_probe.summary_line(record({"one_group": 0.8, "uniform": 0.6}, "along_n"))
    assert "@along_n" in line and "one_group 0.80" in line and "groups 0.75" in line
    assert "fill" not in line and "distribution" not in line and "skewed" not in line
    full = group_probe.summary_line(record({"one_group": 0.8, "uniform": 0.6, "skewed": 0.4,
                                            "skewed_tiles": 0.5, "uniform_64": 0.5}))
    assert "@" not in full
    assert "groups 0.75" in full and "distribution 0.83" in full and "fill 0.80" in full
    assert "(row fill 0.50)" in full


@pytest.mark.skipif(not (torch.cuda.is_available() and group_probe.grouped_linear.with_cuda
                         and torch.cuda.get_device_capability() == (9, 0)),
                    reason="needs an sm_90 GPU and a CUDA build")
def test_group_probe_profile_runs_each_product_once_in_its_range(capsys):
    assert group_probe.main(["--profile", "--cases", "dsv3_ep8_fc2", "--roles", "fwd",
                             "--precisions", "bf16", "--splittings", "one_group,uniform",
                             "--tile-orders", "auto,along_n", "--warmup", "1"]) == 0
    printed = [line.split()[-1] for line in capsys.readouterr().out.splitlines()
               if line.startswith("profiled")]
    assert printed == ["dsv3_ep8_fc2:fwd:bf16:dense", "dsv3_ep8_fc2:fwd:bf16:one_group",
                       "dsv3_ep8_fc2:fwd:bf16:uniform", "dsv3_ep8_fc2:fwd:bf16:one_group@along_n",
                       "dsv3_ep8_fc2:fwd:bf16:uniform@along_n"]
