#!/usr/bin/env bash
# The main job: sets up (scripts/setup.sh), then runs the benchmark
# (`python -m bench`): on a GPU the full protocol of DESIGN.md, on a machine
# without one a small CPU run. Extra arguments go to the benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
scripts/setup.sh
# matplotlib draws the benchmark's PNG; without it (no network) the run still
# writes its JSON and tables.
"$PY" -c "import matplotlib" >/dev/null 2>&1 ||
  "$PY" -m pip install -q matplotlib >/dev/null 2>&1 ||
  echo "bench: matplotlib could not be installed; the plot is skipped"
"$PY" -m bench "$@"
