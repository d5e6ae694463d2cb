"""Benchmark of grouped_linear against its peers: `python -m bench` (from the repo root).

Protocol: shared/DESIGN.md, section "Benchmarks", and bench_cases.json.
On a GPU it measures GEMM throughput per role (fwd, dgrad, wgrad) against
F.grouped_mm, a per-expert loop and dense cuBLAS, the host cost per call, and
the Python layer of GroupedLinear.forward. Without a GPU it runs a small CPU
version of the same measurements, which says nothing about GPU speed.

Modules, one concern each:
  cases.py          bench_cases.json, routing (uniform / skewed), CPU cases
  timing.py         CUDA-event and perf_counter timers behind one interface
  peers.py          the implementations we compare with (grouped_mm, loop, dense)
  throughput.py     TFLOP/s per case, routing, role and implementation
  host_overhead.py  host µs per call with the GPU time beside it
  python_layer.py   GroupedLinear.forward's Python side alone (native call stubbed)
  meta.py           date, commit, versions, device, engine
  report.py         JSON output and table rows, printed as text
  make_table.py     BENCHMARKS.md (Markdown) from a result JSON
  quantize_probe.py the FP8 weight quantization's time and bandwidth (a diagnostic)
"""
