#!/usr/bin/env bash
# Installs what grouped_linear needs to build and test, skipping whatever is
# already present, then builds and installs the package (incrementally: CMake
# keeps its build folder under build/).
#
#   PYTHON=python3     the interpreter to install into
#   GL_SKIP_INSTALL=1  only check/install dependencies
#   GL_WITH_TESTS=1    also build the C++ tests in the same CMake tree
#                      (build/<wheel tag>/), so CUDA sources compile once
#   GL_SM90_TUNING=1   also build the candidate sm90 tile configurations
#                      that `python -m bench.tune_sm90` compares
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

have_module() { "$PY" -c "import $1" >/dev/null 2>&1; }
pip_install() { echo "setup: pip install $*"; "$PY" -m pip install -q "$@"; }

have_module torch || pip_install "torch==2.13.0"
have_module scikit_build_core || pip_install "scikit-build-core>=0.10"
have_module pytest || pip_install pytest
have_module numpy || pip_install numpy

cmake_ok() {
  command -v cmake >/dev/null 2>&1 || return 1
  local v
  v=$(cmake --version | head -1 | awk '{print $3}')
  [ "$(printf '%s\n3.24\n' "$v" | sort -V | head -1)" = "3.24" ]
}
cmake_ok || pip_install "cmake>=3.24"
command -v ninja >/dev/null 2>&1 || pip_install ninja

# nvcc compiles the CUDA engines wherever it exists (CI too, with no GPU);
# cuBLAS headers come from the toolkit or the nvidia-cublas wheel.
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -n "$NVCC" ]; then
  cuda_home=$(dirname "$(dirname "$NVCC")")
  cuda_major=$("$NVCC" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  if [ ! -f "$cuda_home/include/cublas_v2.h" ] && ! "$PY" - <<PYEOF
import glob, importlib.util, sys
spec = importlib.util.find_spec("nvidia")
dirs = list(spec.submodule_search_locations) if spec else []
sys.exit(0 if any(glob.glob(d + "/*/include/cublas_v2.h") for d in dirs) else 1)
PYEOF
  then
    if [ "$cuda_major" -ge 13 ]; then pip_install "nvidia-cublas>=13,<14"; else pip_install "nvidia-cublas-cu${cuda_major}"; fi
  fi
  # CUTLASS headers for the Hopper grouped engine (pinned; headers only, so no deps).
  # find_spec, not import: the headers are all we need, not the package's dependencies.
  if [ ! -f .deps/cutlass/include/cute/tensor.hpp ] &&
     ! "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('cutlass_library') is None)"; then
    pip_install --no-deps "nvidia-cutlass==4.2.0.0"
  fi
fi

# GoogleTest sources for the C++ tests of the core.
if [ ! -f /usr/src/googletest/CMakeLists.txt ] && [ ! -f .deps/googletest/CMakeLists.txt ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: apt-get install googletest"
    (apt-get update -qq && apt-get install -y -qq googletest) >/dev/null 2>&1 ||
      echo "setup: googletest could not be installed; the C++ tests will be skipped"
  fi
fi

# ccache (optional): repeat builds, fresh clones on the same machine included,
# recompile only what changed (cmake/ccache.cmake).
if ! command -v ccache >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "setup: apt-get install ccache"
  (apt-get install -y -qq ccache || (apt-get update -qq && apt-get install -y -qq ccache)) >/dev/null 2>&1 ||
    echo "setup: ccache could not be installed; building without it"
fi

[ "${GL_SKIP_INSTALL:-0}" = 1 ] && exit 0
echo "setup: building and installing grouped_linear"
extra=()
[ "${GL_WITH_TESTS:-0}" = 1 ] && extra+=(-C cmake.define.GL_BUILD_TESTS=ON)
[ "${GL_SM90_TUNING:-0}" = 1 ] && extra+=(-C cmake.define.GL_SM90_TUNING=ON)
set -o pipefail
"$PY" -m pip install -q --no-build-isolation --no-deps "${extra[@]}" . 2>&1 |
  { grep -v "Running pip as the 'root' user" || true; }
"$PY" -c "import grouped_linear as gl; print('setup: grouped_linear', gl.__version__, '| CUDA engines:', gl.with_cuda)"
