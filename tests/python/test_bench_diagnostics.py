"""The benchmark's FP8 end-to-end steps and its diagnostics' arguments, on
the CPU: every step of bench.fp8_module runs and is timed, and
bench.step_profile / bench.store_probe / bench.host_profile /
bench.kernel_timeline / bench.tune_sm90 refuse unknown names (bench.host_pieces,
bench.update_probe and bench.gemm_pace bad counts),
and bench.host_ab malformed builds, before they look for a GPU;
bench.tune_sm90 records each kernel under each tile order asked for;
bench.update_probe times one delayed-scaling update a step (GPU)."""

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import (fp8_module, gemm_pace, host_ab, host_overhead, host_pieces,  # noqa: E402
                   host_profile, kernel_timeline, step_profile, store_probe, tune_sm90, update_probe)
from bench.cases import HostCase, ThroughputCase, load_cases, make_splits  # noqa: E402
from bench.timing import HostTimer  # noqa: E402


def test_every_end_to_end_step_runs_on_the_cpu():
    case = ThroughputCase("tiny", G=3, K=32, N=16, T=40)
    [record] = fp8_module.measure_case(case, torch.device("cpu"), HostTimer(), warmup=0, reps=1,
                                       routings=["skewed"])
    assert list(record["impls"]) == list(fp8_module.STEPS)
    for name, entry in record["impls"].items():
        assert entry["median_ms"] > 0, (name, entry)
        assert entry["speedup_over_bf16"] > 0, (name, entry)


def test_named_step_leaves_no_gradient_behind():
    case = ThroughputCase("tiny", G=2, K=16, N=16, T=24)
    layer, x, dy = fp8_module.case_inputs(case, torch.device("cpu"))
    step = fp8_module.named_step("fp8_delayed_cached_weights", layer, x, dy, [10, 14])
    step()
    assert layer.weight.grad is None and x.grad is None


def test_step_profile_names_an_unknown_recipe():
    with pytest.raises(SystemExit, match=r"--recipes: unknown \['fp9'\]; expected some of"):
        step_profile.main(["--recipes", "bf16,fp9"])


@pytest.mark.parametrize("main", [step_profile.main, store_probe.main, host_profile.main,
                                  kernel_timeline.main],
                         ids=["step", "store", "host", "timeline"])
def test_diagnostics_name_an_unknown_case(main):
    with pytest.raises(SystemExit, match=r"--cases: unknown \['no_such_case'\]"):
        main(["--cases", "no_such_case"])


@pytest.mark.parametrize("tool, argv, message", [
    ("host_pieces", ["--groups", "8,x"],
     "--groups: expected positive integers like 8,32,128, got '8,x'"),
    ("host_pieces", ["--groups", "0"], "--groups: expected positive integers"),
    ("host_pieces", ["--calls", "0"], "--calls: expected a positive count"),
    ("update_probe", ["--groups", "8,x"],
     "--groups: expected positive integers like 8,32,128, got '8,x'"),
    ("update_probe", ["--history", "0,16"], "--history: expected positive integers"),
    ("update_probe", ["--history", ""], "--history: expected positive integers"),
    ("update_probe", ["--steps", "0"], "--steps: expected a positive count"),
    ("gemm_pace", ["--k", "64,x"], "--k: expected positive integers like 8,32,128, got '64,x'"),
    ("gemm_pace", ["--groups", "0"], "--groups: expected positive integers"),
    ("gemm_pace", ["--rows", "0"], "--rows: expected a positive count"),
])
def test_probes_name_bad_arguments_before_looking_for_a_gpu(tool, argv, message, capsys):
    main = {"host_pieces": host_pieces.main, "update_probe": update_probe.main,
            "gemm_pace": gemm_pace.main}[tool]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_kernel_timeline_splits_queued_calls_into_steps():
    # Two calls of a cast then a GEMM: (name, start, end) in µs.
    events = [("cast", 0.0, 5.0), ("gemm", 6.0, 16.0),
              ("cast", 17.0, 24.0), ("gemm", 26.0, 38.0)]
    cast, gemm = kernel_timeline.per_call_steps(events, calls=2)
    assert cast == {"name": "cast", "us": 6.0, "gap_before_us": 1.0}
    assert gemm == {"name": "gemm", "us": 11.0, "gap_before_us": 1.5}
    assert kernel_timeline.per_call_steps(events[:3], calls=2) is None
    assert kernel_timeline.per_call_steps([], calls=2) is None


def test_asked_calls_run_each_named_call_once_a_mode():
    """host_profile's and kernel_timeline's loop: the named implementations
    in order, each mode, ready to run under its grad mode."""
    case = HostCase("tiny", G=2, K=16, N=16, rows_per_group=3)  # K = N: the floor views x
    calls = list(host_overhead.asked_calls([case], "grouped_linear,autograd_floor",
                                           ["fwd_no_grad", "fwd_bwd"], torch.device("cpu")))
    assert [(c.name, mode) for _, c, mode, _, _ in calls] == [
        ("grouped_linear", "fwd_no_grad"), ("grouped_linear", "fwd_bwd"),
        ("autograd_floor", "fwd_no_grad"), ("autograd_floor", "fwd_bwd")]
    for got_case, candidate, mode, fn, grad_mode in calls:
        assert got_case is case
        with grad_mode:
            fn()
        assert all(p.grad is None for p in candidate.params), (candidate.name, mode)
    with pytest.raises(SystemExit, match=r"--impls: unknown \['nope'\]"):
        list(host_overhead.asked_calls([case], "nope", ["fwd_no_grad"], torch.device("cpu")))


def test_kernel_timeline_refuses_a_single_call():
    with pytest.raises(SystemExit):
        kernel_timeline.main(["--calls", "1"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU case")
def test_update_probe_needs_a_gpu(capsys):
    assert update_probe.main(["--groups", "8", "--history", "4"]) == 2
    assert "needs a GPU" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU case")
def test_gemm_pace_needs_a_gpu(capsys):
    assert gemm_pace.main(["--groups", "1", "--k", "64", "--n", "64"]) == 2
    assert "needs a GPU" in capsys.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_update_probe_times_one_update_a_step(tmp_path):
    import json
    out = tmp_path / "update.json"
    assert update_probe.main(["--groups", "8", "--history", "1,16", "--steps", "3",
                              "--out", str(out)]) == 0
    records = json.loads(out.read_text())["records"]
    assert [(r["G"], r["history_len"]) for r in records] == [(8, 1), (8, 16)]
    for r in records:
        assert len(r["launch_us"]) == 3 and all(us > 0 for us in r["launch_us"])


def test_tune_sm90_names_bad_precision_and_roles(capsys):
    with pytest.raises(SystemExit):
        tune_sm90.main(["--precision", "fp9"])
    assert "invalid choice: 'fp9'" in capsys.readouterr().err
    # wgrad_main_grad exists for per-tensor FP8 only; refused before any GPU is looked for.
    assert tune_sm90.main(["--precision", "fp8_block", "--roles", "fwd,wgrad_main_grad"]) == 2
    assert "--roles: ['wgrad_main_grad'] unknown for fp8_block" in capsys.readouterr().err


def test_tune_sm90_output_is_for_fp8_and_names_its_kernels(capsys):
    assert tune_sm90.main(["--precision", "bf16", "--output", "fp16"]) == 2
    assert "--output fp16 is for --precision fp8, got bf16" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tune_sm90.main(["--precision", "fp8", "--output", "fp32"])
    assert "invalid choice: 'fp32'" in capsys.readouterr().err
    # fp16 picks the fp16 kernels of each role; main_grad stays the float32 one.
    assert tune_sm90.fp8_role_prefix("wgrad", "fp16") == "wgrad_e5m2_fp16_"
    assert tune_sm90.fp8_role_prefix("fwd", "fp16") == "forward_e4m3_fp16_"
    assert tune_sm90.fp8_role_prefix("dgrad", "bf16") == "dgrad_e5m2_bf16_"
    assert tune_sm90.fp8_role_prefix("wgrad_main_grad", "fp16") == "wgrad_e5m2_to_fp32_"


def test_tune_sm90_reads_another_cases_file_and_names_missing_cases(capsys, tmp_path):
    # Both refused before any GPU is looked for, so this runs on the CPU.
    assert tune_sm90.main(["--cases-file", str(tmp_path / "absent.json")]) == 2
    assert "--cases-file" in capsys.readouterr().err
    short = str(REPO / "bench" / "short_group_cases.json")
    assert tune_sm90.main(["--cases-file", short, "--cases", "qwen3_fc1_r512,qwen3_30b_fc1"]) == 2
    err = capsys.readouterr().err
    assert "--cases: unknown ['qwen3_30b_fc1']" in err and "dsv3_fc2_r1536" in err
    # The shapes bracket the 1024-row rule: whole rows a group on each side.
    cases = load_cases(short).throughput
    rows = sorted({c.T // c.G for c in cases})
    assert rows == [512, 768, 1024, 1536] and all(c.T % c.G == 0 for c in cases)


def test_tune_sm90_names_bad_tile_orders_and_routings(capsys):
    assert tune_sm90.main(["--tile-orders", "along_m,diagonal"]) == 2
    assert "--tile-orders: ['diagonal'] unknown" in capsys.readouterr().err
    assert tune_sm90.main(["--routings", "uniform,zipf"]) == 2
    assert "--routings: ['zipf'] unknown" in capsys.readouterr().err


def test_tune_sm90_kernel_filter_keeps_named_parts():
    names = ["forward_e4m3_bf16_halfcoop128x256", "forward_e4m3_bf16_halfcoop128x256_widestore",
             "wgrad_e5m2_bf16_halfcoop128x256_widestore", "dgrad_bf16_coop128x256"]
    assert tune_sm90.select_kernels(names, []) == names
    assert tune_sm90.select_kernels(names, ["widestore"]) == names[1:3]
    assert tune_sm90.select_kernels(names, ["forward_e4m3", "dgrad_"]) == [names[0], names[1],
                                                                          names[3]]
    with pytest.raises(SystemExit, match=r"--kernels: \['pingpong'\] match no built kernel"):
        tune_sm90.select_kernels(names, ["widestore", "pingpong"])


@pytest.mark.parametrize("routing, start_mod_32", [("uniform_unaligned", 16),
                                                   ("uniform_sector_aligned", 0)])
@pytest.mark.parametrize("groups, rows", [(8, 16384), (32, 8192), (128, 32768)])
def test_unaligned_routings_start_groups_off_128_byte_lines(groups, rows, routing, start_mod_32):
    splits = make_splits(routing, groups, rows)
    assert len(splits) == groups and sum(splits) == rows and min(splits) > 0
    starts, column = [], 0
    for m in splits:  # the column-wise copies' group starts (16-aligned)
        starts.append(column)
        column += -(-m // 16) * 16
    assert all(start % 128 != 0 for start in starts[1:]), starts
    assert all(start % 32 == start_mod_32 for start in starts[1:]), starts
    # The same 128-deep k-tiles as uniform routing, but for the last group's one more.
    uniform = make_splits("uniform", groups, rows)
    assert [-(-m // 128) for m in splits[:-1]] == [-(-m // 128) for m in uniform[:-1]]
    assert -(-splits[-1] // 128) == -(-uniform[-1] // 128) + 1


class _FakeOps:
    """Records what tune_sm90 sets; the product's value depends on the kernel."""

    def __init__(self):
        self.kernel, self.order, self.calls = "", "", []

    def set_kernel_override(self, device_type, engine, name):
        self.kernel = name
        self.calls.append(("kernel", name))

    def set_tile_order(self, device_type, engine, order):
        self.order = order
        self.calls.append(("order", order))


def test_tune_sm90_times_each_kernel_under_each_tile_order(monkeypatch):
    fake = _FakeOps()
    monkeypatch.setattr(tune_sm90, "ops", fake)
    timed = []
    monkeypatch.setattr(tune_sm90, "median_ms",
                        lambda timer, fn, warmup, reps: timed.append((fake.kernel, fake.order))
                        or (2.0 if fake.order == "along_n" else 4.0))
    fn = lambda: torch.full((4,), 2.0 if fake.kernel == "wgrad_e4m3_bf16_block_b" else 1.0)
    row = {"case": "c", "routing": "uniform", "role": "wgrad", "kernels": {}}
    args = argparse.Namespace(warmup=0, reps=1, tile_orders=["along_m", "along_n"])
    kernels = ["wgrad_e4m3_bf16_block_a", "wgrad_e4m3_bf16_block_b", "wgrad_e4m3_bf16_c"]
    tune_sm90.time_kernels(fn, "wgrad_e4m3_bf16_block_", kernels, row, 1.0, None, args)
    assert timed == [("wgrad_e4m3_bf16_block_a", "along_m"), ("wgrad_e4m3_bf16_block_a", "along_n"),
                     ("wgrad_e4m3_bf16_block_b", "along_m"), ("wgrad_e4m3_bf16_block_b", "along_n")]
    assert sorted(row["kernels"]) == ["wgrad_e4m3_bf16_block_a@along_m",
                                      "wgrad_e4m3_bf16_block_a@along_n",
                                      "wgrad_e4m3_bf16_block_b@along_m",
                                      "wgrad_e4m3_bf16_block_b@along_n"]
    assert row["kernels"]["wgrad_e4m3_bf16_block_a@along_n"]["ratio_to_dense"] == 0.5
    assert row["kernels"]["wgrad_e4m3_bf16_block_a@along_m"]["rel_err_vs_default"] == 0.0
    assert row["kernels"]["wgrad_e4m3_bf16_block_b@along_m"]["rel_err_vs_default"] == 1.0
    assert (fake.kernel, fake.order) == ("", ""), "the automatic choice is restored"
    # Without --tile-orders: one entry a kernel, under the automatic order.
    row["kernels"], timed[:] = {}, []
    args.tile_orders = []
    tune_sm90.time_kernels(fn, "wgrad_e4m3_bf16_block_", kernels, row, 1.0, None, args)
    assert sorted(row["kernels"]) == ["wgrad_e4m3_bf16_block_a", "wgrad_e4m3_bf16_block_b"]
    assert {order for _, order in timed} == {""}


@pytest.mark.parametrize("builds, pattern", [
    (None, r"--builds: expected label=dir,label=dir"),
    ("only=/x", r"--builds: got 'only=/x'; expected label=dir,label=dir"),
    ("a=/x,b", r"--builds: got 'a=/x,b'"),
    ("a=/no/such/dir,b=/no/such/dir", r"--builds: a=/no/such/dir holds no grouped_linear package"),
])
def test_host_ab_names_bad_builds(builds, pattern):
    with pytest.raises(SystemExit, match=pattern):
        host_ab.main([] if builds is None else ["--builds", builds])


def test_tune_sm90_fp8_products_write_the_asked_output(monkeypatch):
    """Each fp8 role's product (the FP8 section's operands and products, run
    here by the CPU emulation) writes the --output dtype under the kernel
    prefix of that dtype; main_grad stays float32."""
    case = ThroughputCase(name="tiny", G=4, K=128, N=256, T=512)
    got = []

    def run_once(fn, prefix, kernels, row, dense_ms, timer, args, result=None):
        out = (result or fn)()
        got.append((row["role"], row["output"], prefix, tuple(out.shape), out.dtype))

    monkeypatch.setattr(tune_sm90, "time_kernels", run_once)
    monkeypatch.setattr(tune_sm90, "median_ms", lambda timer, fn, warmup, reps: 1.0)
    monkeypatch.setattr(tune_sm90.fp8, "dense_fp8", lambda *a, **k: (lambda: None))
    roles = ["fwd", "dgrad", "wgrad", "wgrad_main_grad"]
    for output in ("bf16", "fp16"):
        args = SimpleNamespace(output=output, warmup=1, reps=1, routings=["uniform"])
        tune_sm90.measure_fp8_case(case, roles, [], torch.device("cpu"), None, args)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}
    expected = []
    for output in ("bf16", "fp16"):
        expected += [("fwd", output, f"forward_e4m3_{output}_", (512, 256), dtype[output]),
                     ("dgrad", output, f"dgrad_e5m2_{output}_", (512, 128), dtype[output]),
                     ("wgrad", output, f"wgrad_e5m2_{output}_", (4, 256, 128), dtype[output]),
                     ("wgrad_main_grad", "fp32", "wgrad_e5m2_to_fp32_", (4, 256, 128),
                      torch.float32)]
    assert got == expected
