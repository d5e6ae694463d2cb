#!/usr/bin/env bash
# The test command: sets up and builds (scripts/setup.sh, with the C++ tests
# in the same CMake tree), then runs the C++ tests of the core (GoogleTest via
# ctest) and the Python tests (pytest). GPU tests run when a GPU is present and
# skip themselves otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# The tuning candidates too (csrc/core/cuda/sm90/tuning/), so that the tests
# compile every CUDA source; they are never chosen automatically.
GL_SM90_TUNING=${GL_SM90_TUNING:-1} GL_WITH_TESTS=1 scripts/setup.sh

echo "== C++ core tests"
build_dir=$(ls -d build/cp*/ | head -1)
if [ -f "$build_dir/tests/cpp/gl_core_tests" ]; then
  (cd "$build_dir" && ctest --output-on-failure)
else
  echo "GoogleTest not available: C++ tests not built"
fi

echo "== Python tests"
"$PY" -m pytest tests/python -q -p no:cacheprovider "$@"
