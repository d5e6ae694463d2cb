#!/usr/bin/env python3
"""RELIABILITY.md (and one merged JSON) from a folder of reliability results.

    python scripts/reliability_report.py RESULTS [--markdown RELIABILITY.md]
                                                 [--json reliability.json]

RESULTS holds what the tests write under GL_RELIABILITY_OUT (fuzz.json,
fuzz_random.json, memory.json, workspaces.json, determinism.json, concurrency.json,
bad_input.json), steps.tsv and environment.txt from
scripts/reliability_gpu.sh, sanitize.json from scripts/sanitize.sh and
initcheck_probe.json from scripts/initcheck_probe.py.
Sections without data are marked pending. Standard library only."""

import argparse
import datetime
import json
import os
import sys

SECTIONS = ["fuzz", "fuzz_random", "memory", "workspaces", "determinism", "concurrency",
            "bad_input", "sanitize", "initcheck_probe"]


def load(folder):
    data = {}
    for name in SECTIONS:
        path = os.path.join(folder, f"{name}.json")
        if os.path.exists(path):
            with open(path) as f:
                data[name] = json.load(f)
    steps = []
    path = os.path.join(folder, "steps.tsv")
    if os.path.exists(path):
        for line in open(path):
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 4:
                steps.append(dict(name=parts[0], rc=parts[1], seconds=parts[2],
                                  summary=parts[3].strip()))
    data["steps"] = steps
    path = os.path.join(folder, "environment.txt")
    data["environment"] = open(path).read().strip() if os.path.exists(path) else ""
    return data


def mib(b):
    return f"{b / 2 ** 20:.2f} MiB" if b is not None else "n/a"


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


PENDING = "_pending: GPU figures come from `scripts/reliability_gpu.sh RESULTS_DIR` on a GPU machine._"


def _with_poison(repro):
    """A random-poison failure's repro line; older runs' lines lack the poison."""
    return repro if "GL_FUZZ_POISON=" in repro else f"GL_FUZZ_POISON=random {repro}"


def fuzz_random_section(d):
    """The second CUDA pass: random bytes (not NaN) left in freed memory, so a
    read of memory nobody wrote gives garbage that NaN would hide or expose
    differently (GL_FUZZ_POISON=random, another base seed)."""
    f = d.get("fuzz_random")
    if not f:
        return []
    failed = f.get("failed", [])
    out = ["## Fuzzing with random bytes in freed memory", "",
           f"- `GL_FUZZ_POISON=random`, device **{f['device']}**, base seed "
           f"**{f['base_seed']}**, **{f['cases']} cases, {f['passed']} passed, "
           f"{len(failed)} failed**, {f['seconds']} s. The same draws and checks as above; "
           "freed CUDA memory holds seeded random bytes instead of NaN before each step.", ""]
    if failed:
        out += ["Failed cases:", ""]
        out += [f"- case {r['index']} (seed {r['seed']}): {r['text']} — "
                f"{r.get('error', '')[:200]}; `{_with_poison(r['repro'])}`"
                for r in failed[:30]]
        out.append("")
    return out


def fuzz_section(d):
    out = ["## Fuzzing (`tests/python/test_fuzz.py`)", ""]
    runs = d.get("fuzz")
    if not runs:
        return out + ["_pending: no fuzz results._", ""]
    f = runs
    failed = f.get("failed", [])
    out += [f"- Device **{f['device']}**, base seed **{f['base_seed']}**, "
            f"**{f['cases']} cases, {f['passed']} passed, {len(failed)} failed**, "
            f"{f['seconds']} s.",
            f"- Recipes {f['by_recipe']}; dtypes {f['by_dtype']}; engines {f['by_engine']}.",
            *([f"- FP8 GEMM accumulation drawn (every case, used by the FP8 ones): "
               f"{f['by_accumulation']}."] if "by_accumulation" in f else []),
            f"- m_splits kinds {f['by_splits']}; largest G {f['groups_max']}; "
            f"{f['k_values']} distinct K and {f['n_values']} distinct N values, K not a "
            f"multiple of 16 in {f['k_not_multiple_of_16']} cases; empty groups in "
            f"{f['with_empty_groups']} cases; main_grad in {f['main_grad']}, bias in {f['bias']}.",
            f"- Reproduce a case: `GL_FUZZ_SEED={f['base_seed']} GL_FUZZ_CASE=<i> "
            f"GL_FUZZ_DEVICE={f['device']} python -m pytest tests/python/test_fuzz.py -q`; "
            f"another run: `GL_FUZZ_SEED=<seed> GL_FUZZ_CASES=<n>`.", ""]
    if failed:
        out += ["Failed cases:", ""]
        out += [f"- case {r['index']} (seed {r['seed']}): {r['text']} — "
                f"{r.get('error', '')[:200]}; `{r['repro']}`" for r in failed[:30]]
        out.append("")
    out += [
        "Each case draws G in 1..256, K and N (multiples of 8, 16, 128, a few off a multiple "
        "of 16, any value), T rows (0 included) spread with empty groups, one group holding "
        "(nearly) all rows, or random sizes; dtype; bias; main_grad; recipe (none, delayed, "
        "current, block); m_splits as a list, host tensor or device tensor; 2-D or 3-D input; "
        "input with or without requires_grad; the engine. Checked: output, dgrad, wgrad "
        "(or the main_grad increment), bias gradient, exact zeros for empty groups; on CUDA "
        "the caching allocator is first filled with NaN so unwritten outputs fail.",
        "",
        "Tolerances (relative Frobenius error against float64 on the CPU):",
        "",
        "| quantity | bound | why |",
        "|---|---|---|",
        "| fp32 / fp16 / bf16 products | 1e-5 / 2e-3 / 1e-2 | reference from the same "
        "low-precision inputs: float32 accumulation (u·sqrt(length) < 4e-6 here) and one "
        "rounding to the output dtype (half an ulp: 4.9e-4 fp16, 3.9e-3 bf16) |",
        "| main_grad increment | 1e-5 | float32 sums into a float32 buffer whose "
        "prior values are of dW's size |",
        "| float32 results of the FP8 kernels (wgrad, main_grad) | 3e-4 | the tensor core adds "
        "FP8 products at a reduced accumulator width inside each 128-deep k-block (about "
        "2^-13 per block) before the kernel promotes the sum to fp32 |",
        "| FP8 vs dequantized operands | the output dtype's bound | the products of the values "
        "the casts produced (CPU quantization reference); a wrong scale/format/block/group "
        "errs by >= 2^-4 |",
        "| FP8 vs unquantized inputs | u_a+u_b+u_a·u_b + dtype bound + 1e-3, relative to "
        "‖\\|A\\|·\\|B\\|‖ | per product term the FP8 rounding errs by at most that (u = 2^-4 "
        "E4M3, 2^-3 E5M2); 1e-3 covers subnormals; holds for any size, also where terms "
        "cancel |",
        "",
        "No drawn size is refused: problems the grouped FP8 kernels do not take (K or N not "
        "a multiple of 16, blockwise scales) run the emulated FP8 path, so an error is a "
        "failure.", ""]
    return out


def memory_section(d):
    out = ["## Memory and workspaces (`tests/python/test_reliability.py`)", ""]
    mem = d.get("memory")
    if not mem:
        out += ["Memory over 10,000 forward+backward steps: " + PENDING, ""]
    else:
        out += ["| mode | steps | shape, engine | growth after warm-up | peak above it | "
                "reserved growth | µs/step |", "|---|---|---|---|---|---|---|"]
        for mode, r in sorted(mem.items()):
            out.append(f"| {mode} | {r['iterations']} | {r['shape']}, {r['engine']} | "
                       f"{r['max_growth_bytes']} B (min {r['allocated_min'] - r['allocated_after_warmup']} B) | "
                       f"{mib(r['peak_above_base_bytes'])} | {mib(r['reserved_growth_bytes'])} | "
                       f"{r['us_per_step']} |")
        out += ["", "`torch.cuda.memory_allocated()` sampled every 500 steps (after a "
                "synchronize) must stay within 256 KiB of its value after 20 warm-up steps "
                "(one leaked 512-byte block per step would add 5 MB). In `reliability_gpu.sh` the "
                "sanitizers run on the same GPU meanwhile, so µs/step is no benchmark.", ""]
    ws = d.get("workspaces", {}).get("cublas")
    if not ws:
        out += ["cuBLAS workspaces per stream: " + PENDING, ""]
    else:
        extra = ", ".join(f"{k[:-6]}: {v} B kept" for k, v in ws.items() if k.endswith("_delta"))
        out += [f"cuBLAS workspaces, one fresh thread calling on streams s1, s1, s2, s1, s2, s2: "
                f"memory_allocated grows by {ws['deltas_per_call']} bytes: one "
                f"{mib(ws['workspace_bytes'])} workspace on each new stream, none on a stream "
                f"seen before. {extra}. After the thread exits {mib(ws['kept_after_thread_exit_bytes'])} "
                "stay allocated (see below).", ""]
    out += [
        "How workspaces are kept (`csrc/core/cuda/stream_resources.cpp`): the cuBLAS engine "
        "keeps, per thread, a table of (device, stream) → cuBLAS handle bound to that stream "
        "with `cublasSetStream` and a 32 MiB workspace from torch's caching allocator "
        "(`raw_alloc_with_stream` on that stream) set with `cublasSetWorkspace`. An entry is "
        "made on the first call of a thread on a (device, stream) and found again by a "
        "linear scan; it is never re-bound to another stream. So two streams never share a "
        "workspace, and two threads never share a handle (cuBLAS handles are not thread-safe). "
        "The grouped engine (`sm90_grouped`) takes its small argument block from the caching "
        "allocator on the calling stream for each launch and frees it right after the launch "
        "is queued: the caching allocator hands a freed block out again only to work on the "
        "same stream (stream order makes the reuse safe), never to another stream. "
        "Limitations: entries live for the process (also after their thread exits: a "
        "program that creates many short-lived threads calling the cuBLAS engine keeps 32 "
        "MiB per thread and stream); a `cudaStream_t` destroyed and re-created at the same "
        "address (external streams only; torch's pool streams are never destroyed) would "
        "find the old entry while the old stream's work may still run.", ""]
    return out


def determinism_section(d):
    out = ["## Determinism", ""]
    det = d.get("determinism", {})
    if det:
        out += ["| run | cases | bitwise equal |", "|---|---|---|"]
        for key, table in sorted(det.items()):
            ok = sum(1 for v in table.values() if v)
            bad = [k for k, v in table.items() if not v]
            out.append(f"| {key} | {len(table)} | {ok}{' — differ: ' + ', '.join(bad) if bad else ''} |")
        out.append("")
    if not any(k.startswith("cuda") for k in det):
        out += ["CUDA engines: " + PENDING, ""]
    out += [
        "Each case runs a fresh module (same seed) for two forward+backward steps three "
        "times, with `torch.use_deterministic_algorithms(True)` (and once more without it "
        "on CUDA), and compares outputs, input/weight/bias gradients (and delayed scaling's "
        "scales and amax history) bit for bit; on CUDA for every engine, fp32/fp16/bf16 and "
        "the three FP8 recipes, at sizes aligned for the grouped and FP8 kernels and not "
        "(cuBLAS, emulated FP8).",
        "",
        "The library does not consult the deterministic flag: its paths are deterministic "
        "run to run anyway (same inputs, engine, kernel choice, GPU model and library "
        "versions):",
        "",
        "- `cpu_reference`: fixed loop order, float32 accumulation.",
        "- `sm90_grouped`: CUTLASS pointer-array grouped GEMMs with a persistent tile "
        "scheduler; each output tile is computed by one CTA over the whole reduction "
        "(no split-K / stream-K, no atomics); the bias gradient is a separate column-sum "
        "kernel with a fixed order.",
        "- `cublas`: `cublasGemmEx` per group with `CUBLAS_GEMM_DEFAULT` and a per-stream "
        "handle and workspace: cuBLAS guarantees bitwise-identical results from run to run "
        "on the same architecture and SM count (its split-K variants reduce in a fixed "
        "order; atomics mode is off). Not across cuBLAS versions or GPU models.",
        "- FP8: amax reductions use atomic max (order-independent, exact); the bias "
        "gradient fused into dY's quantization sums per-tile partials in row order in the "
        "last tile; current scaling computes amax partials then reduces them in order.",
        "",
        "Where results legitimately differ (not run-to-run nondeterminism): between engines "
        "(`sm90_grouped` vs `cublas` vs CPU: different accumulation orders); between kernel "
        "choices of `sm90_grouped` (tile shape chosen from the problem; host m_splits "
        "inform the choice, device m_splits do not), and between the FP8 kernels and the "
        "emulated FP8 path; and for delayed scaling, between steps, since the scales "
        "follow the amax history (a run must start from the same module state).", ""]
    return out


def concurrency_section(d):
    out = ["## Concurrency", ""]
    con = d.get("concurrency", {})
    if con:
        out += ["| test | result |", "|---|---|"]
        for key, r in sorted(con.items()):
            res = r.get("skipped") and f"skipped: {r['skipped']}" or (
                "equal to serial (bitwise)" if r.get("equal") else "DIFFERS")
            details = ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("equal", "skipped"))
            out.append(f"| {key} ({details}) | {res} |")
        out.append("")
    if not any(k.startswith("cuda") for k in con):
        out += ["CUDA streams and devices: " + PENDING, ""]
    out += [
        "Threads share one bf16/fp32 module (gradients through `torch.autograd.grad`, so "
        "nothing is accumulated into shared parameters); under FP8 each thread has its own "
        "module copy. On CUDA each thread runs on its own stream; one test issues work on "
        "two streams from one thread without waiting, so both are in flight at once. Every "
        "result equals the serial one bitwise.",
        "",
        "Refused: one module under FP8 autocast in two threads at once. Its FP8 state "
        "(amax history, scales, weight cache) is held by the outermost autocast region "
        "that first runs the module until that region exits; a call from another thread's "
        "region meanwhile raises RuntimeError naming the module, before any cast "
        "(`test_one_fp8_module_in_two_threads_is_refused`), and the module runs there once "
        "the region has exited. Autocast regions are per thread. "
        "`grouped_linear.fp8._compile_stack` (read only by torch.compile tracing) is "
        "process-wide.", ""]
    return out


def sanitize_section(d):
    out = ["## compute-sanitizer (`scripts/sanitize.sh`)", ""]
    san = d.get("sanitize")
    if not san:
        return out + [PENDING, ""]
    if "error" in san:
        return out + [f"Not run: {san['error']}.", ""]
    out += ["| tool | errors | workload checks | rc | seconds | kernels named in reports |",
            "|---|---|---|---|---|---|"]
    for tool, e in san.items():
        errs = e["errors"] if e["errors"] is not None else "no summary (timed out?)"
        if "warnings" in e:
            errs = f"{errs} ({e['warnings']} warnings)"
        out.append(f"| {tool} | {errs} | {e['checks']} {'passed' if e['workload_ok'] else 'FAILED'} | "
                   f"{e['rc']} | {e['seconds']} | {cell(', '.join(e.get('kernels_in_reports', [])))} |")
    out += ["", "Workload (`scripts/sanitize_workload.py`): G=4, T=96, K=64, N=48 with an "
            "empty group, bf16 and fp32, forward / dgrad / wgrad (+bias, +fused "
            "accumulation) on every CUDA engine with host and device m_splits; FP8 "
            "(delayed, current, block) through GroupedLinear at K,N = 64,48 (FP8 kernels) "
            "and 40,24 (emulated); every result compared with the CPU engine. memcheck and "
            "initcheck run with `PYTORCH_NO_CUDA_MEMORY_CACHING=1`.", ""]
    probe = d.get("initcheck_probe")
    if probe:
        out += ["initcheck attribution (`scripts/initcheck_probe.py`: one bf16 product per "
                "process under initcheck, its output copied to the host; \"prefilled\": the "
                "output filled with NaN by a torch kernel first):", "",
                "| probe | errors | host-API reports (cudaMemcpy source) | device reads | "
                "result correct |", "|---|---|---|---|---|"]
        for name, r in probe.items():
            kernels = ", ".join(f"{k} ({n})" for k, n in r.get("device_reads_by_kernel", {}).items())
            reads = f"{r.get('device_read_reports')}" + (f": {cell(kernels)}" if kernels else "")
            out.append(f"| {name} | {r.get('errors')} | {r.get('host_api_reports')} | {reads} | "
                       f"{'yes' if r.get('probe_ok') else 'NO'} |")
        out.append("")
    return out


def bad_input_section(d):
    out = ["## Bad input (`tests/python/test_bad_input_matrix.py`)", ""]
    rows = d.get("bad_input", {})
    if not rows:
        return out + ["_pending: no results._", ""]
    cases = {}
    for key, r in rows.items():
        cases.setdefault(r["id"], []).append(r)
    out += ["Every error case: the exception, a message naming the argument, nothing "
            "written into the module, no autocast region left open, then a correct call "
            "(float64 reference; FP8 cases also an FP8 call against the dequantized "
            "operands). `accepted` rows document behaviour that is not an error.", "",
            "| case | module | recipe | input | expected | message | where it ran |",
            "|---|---|---|---|---|---|---|"]
    for cid, rs in sorted(cases.items(), key=lambda item: item[1][0].get("order", 0)):
        r0 = next((r for r in rs if r["status"] == "passed"), rs[0])
        where = "; ".join(
            f"{r['device']}-{r['engine']}: " + ("passed" if r["status"] == "passed" else
                                               f"skipped ({r.get('reason', '')})")
            for r in sorted(rs, key=lambda r: (r["device"], r["engine"])))
        message = r0.get("message") or r0.get("notes") or (
            f"(not run here; expects /{r0['pattern']}/)" if r0.get("pattern") else "")
        out.append(f"| `{cid}` | {r0['module']} | {r0['recipe']} | {cell(r0['what'])} | "
                   f"{r0['expected']} | {cell(message[:160])} | {cell(where)} |")
    passed = sum(1 for rs in cases.values() if any(r["status"] == "passed" for r in rs))
    out += ["", f"{len(cases)} cases, {passed} run somewhere in this pass.", ""]
    return out


UNTESTED = [
    "## What stays untested",
    "",
    "- Two GPUs: a module on one GPU called while another is current, m_splits on another "
    "GPU, and two devices in two threads are written (`test_two_devices_cuda`, matrix rows "
    "`other_gpu_current`, `m_splits_other_gpu`) but skip on one-GPU machines.",
    "- Device m_splits that are invalid (negative, wrong sum) on `sm90_grouped`: read on "
    "the device without a sync, so they cannot raise (documented in README: negative "
    "entries count as 0, rows past the input are dropped).",
    "- Out-of-memory: not provoked (allocation failures come from torch's allocator as "
    "torch.OutOfMemoryError).",
    "- Sanitizers cover a small workload (listed above), not the whole suite; racecheck "
    "checks shared-memory hazards only, not global-memory races between CTAs.",
    "- Determinism across GPU models, driver or cuBLAS versions (not promised).",
    "- Processes that create many short-lived threads using the cuBLAS engine (per-thread "
    "workspaces are kept, see above).",
    "",
]


def markdown(d, total_seconds=None):
    steps = d["steps"]
    lines = ["# Reliability", "",
             "Generated by `scripts/reliability_report.py` on "
             f"{datetime.date.today().isoformat()}; the GPU pass is "
             "`scripts/reliability_gpu.sh RESULTS_DIR` (fuzz, memory, workspaces, "
             "determinism, concurrency, bad input, compute-sanitizer, then this file).", ""]
    gpu_data = bool(d.get("memory")) or (d.get("fuzz") or {}).get("device") == "cuda"
    if not gpu_data:
        lines += ["**This file comes from a CPU-only run: every GPU figure (CUDA fuzzing, "
                  "memory, workspaces, CUDA determinism and concurrency, sanitizers) is "
                  "pending until `scripts/reliability_gpu.sh` runs on a GPU machine.**", ""]
    if d.get("environment"):
        lines += ["Environment:", "", "```", d["environment"], "```", ""]
    if steps:
        lines += ["| step | exit | seconds | pytest / tool summary |", "|---|---|---|---|"]
        lines += [f"| {s['name']} | {s['rc']} | {s['seconds']} | {cell(s['summary'])} |"
                  for s in steps]
        if total_seconds is not None:
            lines.append(f"| total | | {total_seconds} | |")
        lines.append("")
    for section in (fuzz_section, fuzz_random_section, memory_section, determinism_section,
                    concurrency_section, sanitize_section, bad_input_section):
        lines += section(d)
    lines += UNTESTED
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--markdown", default="RELIABILITY.md")
    parser.add_argument("--json")
    parser.add_argument("--total-seconds", type=int)
    args = parser.parse_args(argv)
    d = load(args.results)
    with open(args.markdown, "w") as f:
        f.write(markdown(d, args.total_seconds))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(d, f, indent=1, default=str)
    missing = [s for s in SECTIONS if s not in d]
    print(f"wrote {args.markdown}" + (f" and {args.json}" if args.json else "") +
          (f"; sections without data: {', '.join(missing)}" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
