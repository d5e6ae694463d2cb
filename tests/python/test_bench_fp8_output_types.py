"""The FP8 benchmark's output-type rows, on the CPU: the products it times
write the type they are named for (checked against a float64 product of the
dequantized operands), each ratio is taken against the dense peer of the
same output type or not at all, and make_table renders the section."""

import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import fp8_throughput, make_table  # noqa: E402
from bench.cases import ThroughputCase, make_splits  # noqa: E402
from bench.throughput import Settings  # noqa: E402
from bench.timing import make_timer  # noqa: E402

CASE = ThroughputCase("tiny_outputs", G=3, K=160, N=96, T=200)
CPU = torch.device("cpu")

# Relative error (Frobenius) against float64 on the same FP8 codes: the
# emulation accumulates in fp32 (K <= 200 terms: about 1e-6), then rounds
# once to the output type (fp16: 2^-11 relative per element, bf16: 2^-8).
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _reference(role, op, splits, dyq_t, xq_t):
    bounds = [0]
    for m in splits:
        bounds.append(bounds[-1] + m)
    x = op.xq.double() * op.sx.double()
    dy = op.dyq.double() * op.sdy.double()
    w = op.wq.double() * op.sw.double().view(-1, 1, 1)
    if role == "fwd":
        return torch.cat([x[bounds[g]:bounds[g + 1]] @ w[g].t() for g in range(CASE.G)])
    if role == "dgrad":
        return torch.cat([dy[bounds[g]:bounds[g + 1]] @ w[g] for g in range(CASE.G)])
    return torch.stack([dy[bounds[g]:bounds[g + 1]].t() @ x[bounds[g]:bounds[g + 1]]
                        for g in range(CASE.G)])


@pytest.mark.parametrize("role", ["fwd", "dgrad", "wgrad"])
@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32])
def test_products_write_the_named_type(role, out_dtype):
    op = fp8_throughput.Operands(CASE, CPU)
    splits = make_splits("skewed", CASE.G, CASE.T)
    dyq_t = fp8_throughput.columnwise(op.dyq, splits)
    xq_t = fp8_throughput.columnwise(op.xq, splits)
    out = fp8_throughput.per_tensor_product(role, CASE, op, splits, dyq_t, xq_t, True,
                                            out_dtype)()
    assert out.dtype == out_dtype
    ref = _reference(role, op, splits, dyq_t, xq_t)
    assert out.shape == ref.shape
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < TOLERANCE[out_dtype], f"{role} into {out_dtype}: relative error {err:.2e}"


def test_output_types_records_and_table(monkeypatch):
    # The dense peer fails for fp16 (as a torch without it would): a result,
    # not a crash, and no ratio for our fp16 row.
    real_dense = fp8_throughput.dense_fp8

    def dense(role, case, device, fast=False, out_dtype=torch.bfloat16):
        if out_dtype == torch.float16:
            raise RuntimeError("no fp16 output here")
        product = real_dense(role, case, device, fast, out_dtype)
        try:
            product()
        except Exception:  # noqa: BLE001  torch._scaled_mm may not run on this CPU
            return lambda: torch.zeros(1, dtype=out_dtype)
        return product

    monkeypatch.setattr(fp8_throughput, "dense_fp8", dense)
    settings = Settings(warmup=0, reps=1, roles=["fwd", "dgrad", "wgrad"],
                        routings=["skewed", "uniform"], engines=["cpu"])
    records = fp8_throughput.run_output_types([CASE], CPU, make_timer(CPU), settings)
    assert [r["role"] for r in records] == ["fwd", "dgrad", "wgrad"]
    for r in records:
        assert r["routing"] == "uniform"
        names = list(r["impls"])
        assert names == ["grouped_linear:fp8@bf16", "grouped_linear:fp8@fp16",
                         "grouped_linear:fp8@fp32", "dense_fp8@bf16", "dense_fp8@fp16",
                         "dense_fp8@fp32"]
        for label in ("bf16", "fp32"):
            ours, peer = r["impls"][f"grouped_linear:fp8@{label}"], r["impls"][f"dense_fp8@{label}"]
            assert ours["ratio_to_dense"] == pytest.approx(ours["tflops"] / peer["tflops"])
        assert "tflops" in r["impls"]["grouped_linear:fp8@fp16"]
        assert "ratio_to_dense" not in r["impls"]["grouped_linear:fp8@fp16"]
        assert "no fp16 output here" in r["impls"]["dense_fp8@fp16"]["error"]

    text = make_table.render({"meta": {}, "fp8_output_types": records})
    assert "## FP8 output types" in text
    header = next(line for line in text.splitlines()
                  if line.startswith("| case | routing | role | grouped_linear:fp8@bf16"))
    assert header.split(" | ")[-1].startswith("dense_fp8@fp32")
    row = next(line for line in text.splitlines() if line.startswith("| tiny_outputs | uniform | wgrad"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert "(" in cells[3] and "(" in cells[5] and "(" not in cells[4]  # fp16: no ratio
    assert cells[7].startswith("n/a")


def test_a_later_runs_output_types_render_in_its_section(tmp_path):
    ours = {"median_ms": 1.0, "tflops": 2.0, "ratio_to_dense": 0.5}
    record = {"case": "c", "routing": "uniform", "role": "fwd",
              "impls": {"grouped_linear:fp8@fp32": ours,
                        "dense_fp8@fp32": {"median_ms": 0.5, "tflops": 4.0},
                        "dense_fp8@fp16": {"error": "RuntimeError: none"}}}
    base, later = tmp_path / "base.json", tmp_path / "later.json"
    base.write_text(json.dumps({"meta": {"commit": "a"}, "throughput": []}))
    later.write_text(json.dumps({"meta": {"commit": "b"}, "fp8_output_types": [record]}))
    out = tmp_path / "B.md"
    assert make_table.main([str(base), "--compare", str(later), "--write", str(out)]) == 0
    section = out.read_text().split("## Re-run at `b`")[1]
    assert "### FP8 output types" in section
    assert "| c | uniform | fwd | 2.00 (0.50) | 4.00 | n/a [1] |" in section
    assert "- [1] dense_fp8@fp16: RuntimeError: none" in section


def test_each_case_turns_a_failing_case_into_an_error_record_and_runs_the_rest(capsys):
    from bench.report import each_case
    cases = [ThroughputCase(name, G=2, K=8, N=8, T=4) for name in ("a", "b", "c")]

    def measure(case):
        if case.name == "b":
            raise MemoryError("out of memory for b")
        return [{"case": case.name, "impls": {}}]

    records = each_case(cases, make_timer(CPU), lambda c: f"heading {c.name}", measure)
    assert [r["case"] for r in records] == ["a", "b", "c"]
    assert records[1] == {"case": "b", "G": 2, "K": 8, "N": 8, "T": 4,
                          "error": "MemoryError: out of memory for b"}
    err = capsys.readouterr().err
    assert "heading a" in err and "heading c" in err and "out of memory for b" in err
