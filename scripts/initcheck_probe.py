"""Attributes compute-sanitizer initcheck reports to what wrote the memory.

initcheck marks device memory initialized when a thread stores to it, a
memset or memcpy fills it. The sm90 grouped kernels write their outputs with
the Tensor Memory Accelerator (TMA bulk stores from shared memory). If the
tool does not count those stores, every later read of such an output (the
copy to the host included) is reported as uninitialized although the tests
prove each element written (outputs poisoned with NaN before the call).

Each probe runs one product in its own process under initcheck
(PYTORCH_NO_CUDA_MEMORY_CACHING=1: every tensor is a fresh cudaMalloc) and
copies the result to the host:

  sm90_forward_empty      sm90_grouped forward into torch.empty
  sm90_forward_prefilled  the same output first filled with NaN by a torch kernel
  sm90_wgrad_empty        sm90_grouped wgrad into torch.empty
  cublas_forward_empty    the cuBLAS engine into torch.empty
  sm90_forward_recycled   sm90_grouped forward with torch's caching allocator
                          on, after both of its pools were filled by a torch
                          kernel and freed (256 MB in one large block, 32 MB
                          in 512 KB blocks: allocations up to 1 MB, such as
                          the engine's workspace and these outputs, come from
                          the small pool's 2 MB segments): every buffer then
                          lies in memory the tool counts as written

and checks the result against the CPU engine. Host-API reports that the
prefilled probe lacks come from outputs the tool did not see written; device
reads that the recycled probe lacks come from a buffer the kernel reads
before anything the tool tracks has written it (the operands and the
argument arrays are written by copies and ordinary stores, so the workspace
of CUTLASS's tensor maps is the candidate).

    python scripts/initcheck_probe.py OUT_DIR        # all probes, summary + JSON
    python scripts/initcheck_probe.py --probe NAME   # one probe (what the tool runs)
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

G, T, K, N = 4, 96, 64, 48
SPLITS = [30, 0, 50, 16]
PROBES = ("sm90_forward_empty", "sm90_forward_prefilled", "sm90_wgrad_empty",
          "cublas_forward_empty", "sm90_forward_recycled")


def run_probe(name: str) -> int:
    import torch

    from grouped_linear import ops

    if name.endswith("recycled"):  # initialized memory for the caching allocator to hand out
        large = torch.zeros(64 * 2**20, dtype=torch.float32, device="cuda")
        small = [torch.zeros(128 * 2**10, dtype=torch.float32, device="cuda") for _ in range(64)]
        del large, small
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(T, K, generator=gen).bfloat16()
    w = (torch.randn(G, N, K, generator=gen) / 8).bfloat16()
    dy = torch.randn(T, N, generator=gen).bfloat16()
    engine = "cublas" if name.startswith("cublas") else "sm90_grouped"
    xc, wc, dyc = x.cuda(), w.cuda(), dy.cuda()
    if "wgrad" in name:
        want = ops.wgrad(dy, x, SPLITS)[0]
        out = torch.empty(G, N, K, dtype=torch.bfloat16, device="cuda")
        ops.wgrad(dyc, xc, SPLITS, grad_weight=out, engine=engine)
    else:
        want = ops.forward(x, w, None, SPLITS)
        out = torch.empty(T, N, dtype=torch.bfloat16, device="cuda")
        if name.endswith("prefilled"):
            out.fill_(float("nan"))
        ops.forward(xc, wc, None, SPLITS, out=out, engine=engine)
    got = out.cpu()  # the cudaMemcpy initcheck watches
    err = float((got.double() - want.double()).norm() / want.double().norm())
    ok = bool(torch.isfinite(got).all()) and err < 2e-2
    print(f"probe {name}: engine {engine}, rel err {err:.2e}, all finite "
          f"{bool(torch.isfinite(got).all())}: {'ok' if ok else 'FAIL'}", flush=True)
    return 0 if ok else 1


def count_reports(text: str) -> dict:
    host = len(re.findall(r"Host API memory access error", text))
    device_blocks = re.findall(r"Uninitialized __global__ memory read[^\n]*\n(?:=+[^\n]*\n){0,3}",
                               text)
    kernels = {}
    for block in device_blocks:
        m = re.search(r"at (?:0x[0-9a-f]+ in )?(.+?)(?:\+0x[0-9a-fA-F]+)?\s*$", block, re.M)
        key = (m.group(1) if m else "?")[:100]
        kernels[key] = kernels.get(key, 0) + 1
    total = re.search(r"ERROR SUMMARY: (\d+) error", text)
    return {"errors": int(total.group(1)) if total else None, "host_api_reports": host,
            "device_read_reports": len(device_blocks), "device_reads_by_kernel": kernels,
            "probe_ok": bool(re.search(r"^probe \S+: .*: ok$", text, re.M))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", nargs="?")
    parser.add_argument("--probe", choices=PROBES)
    args = parser.parse_args()
    if args.probe:
        return run_probe(args.probe)
    if not args.out_dir:
        parser.error("OUT_DIR or --probe is required")
    cs = os.environ.get("COMPUTE_SANITIZER", "/usr/local/cuda/bin/compute-sanitizer")
    if not os.path.exists(cs):
        cs = shutil.which("compute-sanitizer") or ""
    if not cs:
        print("initcheck_probe: compute-sanitizer not found")
        return 2
    os.makedirs(args.out_dir, exist_ok=True)
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    results = {}
    for name in PROBES:
        cmd = [cs, "--tool", "initcheck", "--report-api-errors", "no", "--show-backtrace", "no",
               "--print-limit", "100000", sys.executable, os.path.abspath(__file__), "--probe",
               name]
        probe_env = dict(os.environ) if name.endswith("recycled") else env
        done = subprocess.run(cmd, env=probe_env, capture_output=True, text=True, timeout=300)
        text = done.stdout + done.stderr
        with open(os.path.join(args.out_dir, f"initcheck_probe_{name}.log"), "w") as f:
            f.write(text)
        results[name] = dict(count_reports(text), rc=done.returncode)
        r = results[name]
        print(f"{name:24s} errors={r['errors']} host_api={r['host_api_reports']} "
              f"device_reads={r['device_read_reports']} probe_ok={r['probe_ok']} "
              f"kernels={list(r['device_reads_by_kernel'])[:3]}", flush=True)
    with open(os.path.join(args.out_dir, "initcheck_probe.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0 if all(r["probe_ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
