#!/usr/bin/env bash
# The test command: sets up (scripts/setup.sh), then runs the C++ tests of the
# core (GoogleTest via ctest) and the Python tests (pytest). GPU tests run when
# a GPU is present and skip themselves otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
scripts/setup.sh

echo "== C++ core tests"
cmake -S . -B build/cpp -G Ninja -DCMAKE_BUILD_TYPE=Release -DGL_BUILD_TESTS=ON >/dev/null
cmake --build build/cpp
if [ -f build/cpp/tests/cpp/gl_core_tests ]; then
  (cd build/cpp && ctest --output-on-failure)
else
  echo "GoogleTest not available: C++ tests not built"
fi

echo "== Python tests"
"$PY" -m pytest tests/python -q -p no:cacheprovider "$@"
