#!/usr/bin/env bash
# One pass on a GPU machine: build (all cores), C++ tests, Python tests, then
# the benchmark. Logs and the benchmark JSON go to $1 (default: gpu_results/).
# Sections can be chosen with GL_STEPS (default "build cpp py bench demo";
# demo: the MoE block example in bf16 and in FP8, beside plain PyTorch;
# tune, not in the default: `python -m bench.tune_sm90` for each precision of
# GL_TUNE_PRECISIONS under each tile order of GL_TUNE_TILE_ORDERS, extra
# arguments in GL_TUNE_ARGS; build with GL_SM90_TUNING=1 for the candidates;
# profile, not in the default: `python -m bench.step_profile` under each
# routing of GL_PROFILE_ROUTINGS, extra arguments in GL_PROFILE_ARGS).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
RESULTS=${1:-gpu_results}
STEPS=${GL_STEPS:-build cpp py bench demo}
mkdir -p "$RESULTS"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
status=0
step() { [[ " $STEPS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$RESULTS/gpu.txt" 2>&1 || true

if step build; then
  start=$(date +%s)
  GL_WITH_TESTS=1 scripts/setup.sh > "$RESULTS/build.log" 2>&1 || { echo "BUILD FAILED"; grep -E "error|Error" "$RESULTS/build.log" | head -30; tail -20 "$RESULTS/build.log"; exit 1; }
  echo "build (package, $CMAKE_BUILD_PARALLEL_LEVEL jobs): $(( $(date +%s) - start )) s" | tee -a "$RESULTS/summary.txt"
fi
if step cpp; then
  start=$(date +%s)
  build_dir=$(ls -d build/cp*/ | head -1)
  (cd "$build_dir" && ctest --output-on-failure) > "$RESULTS/cpp_tests.log" 2>&1 || status=1
  echo "C++ tests ($(( $(date +%s) - start )) s): $(grep -E 'tests passed|tests failed' "$RESULTS/cpp_tests.log" | tail -1)" | tee -a "$RESULTS/summary.txt"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$RESULTS/cpp_tests.log" | tee -a "$RESULTS/summary.txt"
fi
if step py; then
  timeout "${GL_PYTEST_TIMEOUT:-1200}" "$PY" -m pytest tests/python -q -p no:cacheprovider -rs > "$RESULTS/py_tests.log" 2>&1 || status=1
  echo "Python tests: $(tail -1 "$RESULTS/py_tests.log")" | tee -a "$RESULTS/summary.txt"
  grep -E "^(FAILED|ERROR)" "$RESULTS/py_tests.log" | head -30
fi
if step bench; then
  "$PY" -m bench --out "$RESULTS/bench.json" ${GL_BENCH_ARGS:-} > "$RESULTS/bench.log" 2>&1 || status=1
  # The FP8 weight quantization's time and bandwidth (a diagnostic, bench/quantize_probe.py).
  "$PY" -m bench.quantize_probe >> "$RESULTS/bench.log" 2>&1 || status=1
  tail -60 "$RESULTS/bench.log"
fi
if step tune; then
  for precision in ${GL_TUNE_PRECISIONS:-bf16 fp8 fp8_block}; do
    "$PY" -m bench.tune_sm90 --precision "$precision" --out "$RESULTS/tune-$precision.json" \
      --tile-orders "${GL_TUNE_TILE_ORDERS:-along_m,along_n,shorter_side}" ${GL_TUNE_ARGS:-} \
      >> "$RESULTS/tune.log" 2>&1 || status=1
  done
  tail -80 "$RESULTS/tune.log"
fi
if step profile; then
  for routing in ${GL_PROFILE_ROUTINGS:-uniform skewed uniform_unaligned uniform_sector_aligned}; do
    "$PY" -m bench.step_profile --routing "$routing" --out "$RESULTS/step-profile-$routing.json" \
      ${GL_PROFILE_ARGS:---cases mixtral_fc1 --recipes fp8_delayed,fp8_block} \
      >> "$RESULTS/profile.log" 2>&1 || status=1
  done
  tail -60 "$RESULTS/profile.log"
fi
if step demo; then
  for mode in "" "--fp8"; do
    "$PY" examples/moe_block.py --steps 300 $mode >> "$RESULTS/demo.log" 2>&1 || status=1
  done
  grep -E "^MoE block|mean step time" "$RESULTS/demo.log" | tee -a "$RESULTS/summary.txt"
fi
exit $status
