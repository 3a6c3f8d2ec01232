#!/usr/bin/env bash
# The test command: set-up, build and install uccl, C++ tests (ctest), Python tests (pytest).
#
#   bash scripts/test.sh                 # everything
#   bash scripts/test.sh -k all_reduce   # extra arguments go to pytest
#
# Fails when any step fails, and when pytest collects no tests (exit code 5).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$UCCL_ROOT"

echo "== build and install the Python package (editable: the source uccl/ is the package)"
"$PYTHON" -m pip install --no-build-isolation -q -e .

echo "== C++ tests (ctest)"
cmake -S . -B build/ctest -G Ninja -DUCCL_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/ctest -j"$UCCL_JOBS"
ctest --test-dir build/ctest --output-on-failure --no-tests=error

echo "== Python tests (pytest)"
set +e
"$PYTHON" -m pytest -q --durations=25 tests "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests (exit code 5): treating that as a failure" >&2
  exit 1
fi
exit "$rc"
