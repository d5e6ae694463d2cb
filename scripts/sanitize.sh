#!/usr/bin/env bash
# compute-sanitizer over a small GPU workload (scripts/sanitize_workload.py:
# bf16/fp32 forward, dgrad, wgrad on every CUDA engine, host and device
# m_splits; FP8 quantize, scaling update and GEMMs through GroupedLinear).
#
#   scripts/sanitize.sh RESULTS_DIR
#
# Runs memcheck, racecheck, initcheck and synccheck (the four concurrently:
# each is host-bound) and writes RESULTS_DIR/<tool>.log and
# RESULTS_DIR/sanitize.json ({tool: {errors, rc, workload_ok, seconds, ...}}).
# memcheck and initcheck run with PYTORCH_NO_CUDA_MEMORY_CACHING=1: inside a
# caching-allocator block an out-of-bounds access lands in memory that is
# still allocated and memcheck cannot see it. API errors (failing CUDA calls)
# are not reported: torch makes some on purpose; the library checks every
# return code itself, so one of its own would fail the workload.
# Environment: COMPUTE_SANITIZER (default /usr/local/cuda/bin/compute-sanitizer,
# then PATH), GL_SANITIZE_TOOLS (default "memcheck racecheck initcheck
# synccheck"), GL_SANITIZE_TIMEOUT (seconds per tool, default 240).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${1:?usage: scripts/sanitize.sh RESULTS_DIR}
mkdir -p "$OUT"
CS=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
[ -x "$CS" ] || CS=$(command -v compute-sanitizer || true)
TOOLS=${GL_SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}
LIMIT=${GL_SANITIZE_TIMEOUT:-240}

if [ -z "$CS" ]; then
  echo "compute-sanitizer not found" | tee "$OUT/sanitize.log"
  printf '{"error": "compute-sanitizer not found"}\n' > "$OUT/sanitize.json"
  exit 2
fi

run_tool() {
  local tool=$1 extra=() env=() limit=200
  case $tool in
    memcheck) extra=(--leak-check no); env=(PYTORCH_NO_CUDA_MEMORY_CACHING=1) ;;
    # initcheck: reports without host backtraces and at most 20 of them; on
    # the H200 printing thousands of reported reads took it past its time limit.
    initcheck) extra=(--show-backtrace no); limit=20; env=(PYTORCH_NO_CUDA_MEMORY_CACHING=1) ;;
    racecheck) extra=(--racecheck-report all) ;;
  esac
  local start=$(date +%s)
  env ${env[@]+"${env[@]}"} timeout "$LIMIT" "$CS" --tool "$tool" --report-api-errors no \
      --print-limit "$limit" ${extra[@]+"${extra[@]}"} "$PY" scripts/sanitize_workload.py \
      > "$OUT/$tool.log" 2>&1
  local rc=$?
  echo "rc=$rc seconds=$(( $(date +%s) - start ))" >> "$OUT/$tool.log"
}

pids=()
for tool in $TOOLS; do
  run_tool "$tool" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

# One summary: the sanitizer's own count per tool, the workload's verdict,
# and the kernels named in error reports.
"$PY" - "$OUT" $TOOLS <<'EOF'
import json, re, sys
out, tools = sys.argv[1], sys.argv[2:]
summary = {}
for tool in tools:
    text = open(f"{out}/{tool}.log", errors="replace").read()
    entry = {}
    m = re.search(r"ERROR SUMMARY: (\d+) error", text)
    r = re.search(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)",
                  text)
    if r:
        entry.update(errors=int(r.group(2)), warnings=int(r.group(3)), hazards=int(r.group(1)))
    elif m:
        entry["errors"] = int(m.group(1))
    else:
        entry["errors"] = None  # no summary: the run did not finish (see the log)
    tail = re.search(r"rc=(\d+) seconds=(\d+)\s*$", text)
    entry["rc"] = int(tail.group(1)) if tail else None
    entry["seconds"] = int(tail.group(2)) if tail else None
    entry["workload_ok"] = "sanitize_workload: 0 failed comparisons" in text
    entry["checks"] = len(re.findall(r"^(?:ok  |FAIL) ", text, re.M))
    # "=========     at <function>+0x70 in <file>:<line>" lines of the reports
    frames = re.findall(r"^=+\s+at (.+?)(?:\+0x[0-9a-fA-F]+)?(?: in \S+)?\s*$", text, re.M)
    entry["kernels_in_reports"] = sorted({f[:120] for f in frames})[:10] if entry["errors"] else []
    summary[tool] = entry
json.dump(summary, open(f"{out}/sanitize.json", "w"), indent=1)
for tool, e in summary.items():
    print(f"{tool}: errors={e['errors']} rc={e['rc']} workload_ok={e['workload_ok']} "
          f"checks={e['checks']} ({e['seconds']} s)")
bad = [t for t, e in summary.items() if e["errors"] != 0 or not e["workload_ok"]]
sys.exit(1 if bad else 0)
EOF
