#!/usr/bin/env bash
# The reliability pass on a GPU machine (the package already built and
# installed): fuzz (>= 1000 cases; then 300 with random bytes, not NaN, left
# in freed memory), memory, workspaces, determinism,
# concurrency, the bad-input matrix, and compute-sanitizer (in the
# background, concurrently), the initcheck attribution probe
# (scripts/initcheck_probe.py), then RELIABILITY.md from the results.
#
#   scripts/reliability_gpu.sh RESULTS_DIR
#
# RESULTS_DIR receives four flat files: reliability.json (every figure),
# reliability.log (the pytest runs), sanitize.log (the four tools' output,
# shortened) and RELIABILITY.md (copy it to the repository root).
# Environment: GL_FUZZ_CASES (default 1000), GL_FUZZ_SEED (default 1234),
# GL_FUZZ_RANDOM_SEED (the random-bytes fuzz's seed, default 4321),
# GL_MEMORY_ITERS (default 10000), GL_SANITIZE_TIMEOUT (default 240 s).
# About 4-6 minutes on one H200.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
RESULTS=${1:?usage: scripts/reliability_gpu.sh RESULTS_DIR}
mkdir -p "$RESULTS"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export GL_RELIABILITY_OUT="$WORK/json"
mkdir -p "$GL_RELIABILITY_OUT"
LOG="$RESULTS/reliability.log"
: > "$LOG"
START=$(date +%s)
status=0

{ command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -2
  "$PY" -c "import torch, grouped_linear as g; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| grouped_linear', g.__file__, '| cuda engines', g.ops.engine_names('cuda'))"
  git rev-parse --short HEAD 2>/dev/null; } > "$GL_RELIABILITY_OUT/environment.txt" 2>&1
cat "$GL_RELIABILITY_OUT/environment.txt" >> "$LOG"

HAS_CUDA=$("$PY" -c "import torch, grouped_linear as g; print(int(torch.cuda.is_available() and g.with_cuda))" 2>/dev/null || echo 0)
if [ "$HAS_CUDA" = 1 ]; then
  FUZZ_DEVICE=cuda; FUZZ_CASES=${GL_FUZZ_CASES:-1000}
  # Sanitizers first, in the background (each tool in its own process).
  GL_SANITIZE_TIMEOUT=${GL_SANITIZE_TIMEOUT:-240} scripts/sanitize.sh "$WORK/sanitize" \
    > "$WORK/sanitize_summary.txt" 2>&1 &
  SAN_PID=$!
else  # a dry run on a machine without a GPU: CPU fuzz, no sanitizers
  FUZZ_DEVICE=cpu; FUZZ_CASES=${GL_FUZZ_CASES:-40}
  mkdir -p "$WORK/sanitize"
  echo "no GPU: sanitizers not run" > "$WORK/sanitize_summary.txt"
  printf '{"error": "no GPU on this machine"}\n' > "$WORK/sanitize/sanitize.json"
  true & SAN_PID=$!
fi

# step NAME TIMEOUT_S COMMAND...: runs it, appends its output to the log and
# a line "name<TAB>rc<TAB>seconds<TAB>last line" to steps.tsv.
step() {
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  echo "== $name: $*" >> "$LOG"
  timeout "$limit" "$@" > "$WORK/$name.out" 2>&1
  local rc=$?
  cat "$WORK/$name.out" >> "$LOG"
  local last=$(grep -E "passed|failed|error|skipped" "$WORK/$name.out" | tail -1)
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$last" \
    >> "$GL_RELIABILITY_OUT/steps.tsv"
  echo "$name: rc=$rc, $(( $(date +%s) - t0 )) s: $last"
  [ "$rc" -eq 0 ] || status=1
}

PYTEST=("$PY" -m pytest -q -p no:cacheprovider -rs)
GL_FUZZ_DEVICE=$FUZZ_DEVICE GL_FUZZ_CASES=$FUZZ_CASES \
  step fuzz 300 "${PYTEST[@]}" tests/python/test_fuzz.py
if [ "$HAS_CUDA" = 1 ]; then  # random bytes, not NaN, in freed memory; other draws
  GL_FUZZ_DEVICE=cuda GL_FUZZ_POISON=random GL_FUZZ_SEED=${GL_FUZZ_RANDOM_SEED:-4321} \
    GL_FUZZ_CASES=${GL_FUZZ_RANDOM_CASES:-300} \
    step fuzz_random 150 "${PYTEST[@]}" tests/python/test_fuzz.py -k test_fuzz_case
fi
step reliability 240 "${PYTEST[@]}" tests/python/test_reliability.py
step bad_input 180 "${PYTEST[@]}" tests/python/test_bad_input_matrix.py

wait "$SAN_PID"
san_rc=$?
[ "$san_rc" -eq 0 ] || status=1
cat "$WORK/sanitize_summary.txt"
mkdir -p "$WORK/sanitize"
{ cat "$WORK/sanitize_summary.txt"
  for f in "$WORK"/sanitize/*.log; do
    [ -f "$f" ] || continue
    echo "== $(basename "$f") ($(wc -l < "$f") lines; first 150 and last 40 shown)"
    head -150 "$f"; echo "..."; tail -40 "$f"
  done; } > "$RESULTS/sanitize.log"
printf '%s\t%s\t%s\t%s\n' sanitize "$san_rc" "" "$(tail -4 "$WORK/sanitize_summary.txt" | tr '\n' ' ')" \
  >> "$GL_RELIABILITY_OUT/steps.tsv"
[ -f "$WORK/sanitize/sanitize.json" ] && cp "$WORK/sanitize/sanitize.json" "$GL_RELIABILITY_OUT/"
# What initcheck's reports come from: one product per process, outputs
# written by TMA stores, by a torch kernel first, or by cuBLAS.
if [ "$HAS_CUDA" = 1 ]; then
  timeout 240 "$PY" scripts/initcheck_probe.py "$WORK/probe" || status=1
  [ -f "$WORK/probe/initcheck_probe.json" ] && cp "$WORK/probe/initcheck_probe.json" "$GL_RELIABILITY_OUT/"
fi

"$PY" scripts/reliability_report.py "$GL_RELIABILITY_OUT" --markdown "$RESULTS/RELIABILITY.md" \
  --json "$RESULTS/reliability.json" --total-seconds $(( $(date +%s) - START )) || status=1
echo "reliability pass: $(( $(date +%s) - START )) s, status $status; results in $RESULTS"
exit $status
