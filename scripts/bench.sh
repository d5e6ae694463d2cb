#!/usr/bin/env bash
# The main job: sets up (scripts/setup.sh), then runs the benchmark
# (`python -m bench`): on a GPU the full protocol of DESIGN.md, on a machine
# without one a small CPU run. Extra arguments go to the benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
scripts/setup.sh
"$PY" -m bench "$@"
