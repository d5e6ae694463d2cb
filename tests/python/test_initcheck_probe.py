"""scripts/initcheck_probe.py counts initcheck's reports by kind and kernel,
and scripts/reliability_report.py puts them in RELIABILITY.md (CPU only: the
probe itself runs under compute-sanitizer on a GPU machine)."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOG = """========= COMPUTE-SANITIZER
========= Host API memory access error at host access to 0x7fbe4080b600 of size 9,216 bytes
=========     Uninitialized access to 0x7fbe4080b600 on access by cudaMemcpy source
=========
========= Host API memory access error at host access to 0x7fbe4080b600 of size 9,216 bytes
=========     Uninitialized access to 0x7fbe4080b620 on access by cudaMemcpy source
=========
========= Uninitialized __global__ memory read of size 4 bytes
=========     at void grouped_gemm<int>(Params)+0x1a30
=========     by thread (128,0,0) in block (3,0,0)
=========
========= Uninitialized __global__ memory read of size 4 bytes
=========     at void grouped_gemm<int>(Params)+0x1a30
=========     by thread (129,0,0) in block (3,0,0)
=========
probe sm90_forward_empty: engine sm90_grouped, rel err 0.00e+00, all finite True: ok
========= ERROR SUMMARY: 4 errors
"""


def test_counts_reports_by_kind_and_kernel():
    probe = load_script("initcheck_probe")
    counts = probe.count_reports(LOG)
    assert counts == {"errors": 4, "host_api_reports": 2, "device_read_reports": 2,
                      "device_reads_by_kernel": {"void grouped_gemm<int>(Params)": 2},
                      "probe_ok": True}
    failed = probe.count_reports(LOG.replace(": ok", ": FAIL"))
    assert failed["probe_ok"] is False
    clean = probe.count_reports("========= ERROR SUMMARY: 0 errors\n")
    assert clean["errors"] == 0 and clean["host_api_reports"] == 0


def test_report_has_the_attribution_table(tmp_path):
    import json

    report = load_script("reliability_report")
    (tmp_path / "sanitize.json").write_text(json.dumps({"initcheck": {
        "errors": 4, "rc": 0, "seconds": 9, "workload_ok": True, "checks": 64}}))
    (tmp_path / "initcheck_probe.json").write_text(json.dumps({
        "sm90_forward_empty": dict(load_script("initcheck_probe").count_reports(LOG), rc=0),
        "cublas_forward_empty": {"errors": 0, "host_api_reports": 0, "device_read_reports": 0,
                                 "device_reads_by_kernel": {}, "probe_ok": True, "rc": 0}}))
    text = report.markdown(report.load(str(tmp_path)))
    assert "initcheck attribution" in text
    assert "| sm90_forward_empty | 4 | 2 | 2: void grouped_gemm<int>(Params) (2) | yes |" in text
    assert "| cublas_forward_empty | 0 | 0 | 0 | yes |" in text
