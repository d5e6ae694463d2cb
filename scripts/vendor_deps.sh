#!/usr/bin/env bash
# Fills .deps/ (ignored by git) with what the build otherwise fetches: the
# CUTLASS headers (cmake/cutlass.cmake looks in .deps/cutlass first) and the
# GoogleTest sources (cmake/googletest.cmake: .deps/googletest). A tree with
# .deps/ then builds with scripts/setup.sh on a machine without a network,
# e.g. a GPU machine that gets a copy of the tree. About 35 MB.
#
#   scripts/vendor_deps.sh          (installs here first what is missing, as setup.sh does)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
GL_SKIP_INSTALL=1 scripts/setup.sh

cutlass=$("$PY" -c "import importlib.util, os; s = importlib.util.find_spec('cutlass_library'); print(os.path.join(list(s.submodule_search_locations)[0], 'source') if s else '')")
if [ ! -f .deps/cutlass/include/cute/tensor.hpp ]; then
  if [ -z "$cutlass" ] || [ ! -d "$cutlass/include" ]; then
    echo "vendor_deps: no CUTLASS headers here (nvidia-cutlass is installed only where nvcc is)" >&2
    exit 1
  fi
  mkdir -p .deps/cutlass/tools/util
  cp -r "$cutlass/include" .deps/cutlass/
  cp -r "$cutlass/tools/util/include" .deps/cutlass/tools/util/
fi
if [ ! -f .deps/googletest/CMakeLists.txt ]; then
  if [ ! -f /usr/src/googletest/CMakeLists.txt ]; then
    echo "vendor_deps: no GoogleTest sources in /usr/src/googletest" >&2
    exit 1
  fi
  cp -r /usr/src/googletest .deps/googletest
fi
du -sh .deps/cutlass .deps/googletest
