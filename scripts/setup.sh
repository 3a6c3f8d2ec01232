#!/usr/bin/env bash
# Set-up shared by scripts/test.sh and scripts/demo.sh (source it or run it).
#
# Checks the build toolchain and installs the Python packages the build, the tests and the
# demo need when they are missing (nothing is downloaded when everything is present).
# System packages are the job of the machine's image (see .ci/run for a fresh Debian 12).
#
# Environment:
#   PYTHON          interpreter to use (default: python3)
#   UCCL_JOBS       parallel build jobs (default: 2; exported as CMAKE_BUILD_PARALLEL_LEVEL)
set -euo pipefail

UCCL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
UCCL_JOBS="${UCCL_JOBS:-2}"
export UCCL_ROOT PYTHON UCCL_JOBS
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$UCCL_JOBS}"

_uccl_need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "setup: '$1' not found; install $2" >&2
    return 1
  fi
}
_uccl_need "$PYTHON" "Python >= 3.9"
_uccl_need cmake "cmake (>= 3.18)"
_uccl_need ninja "ninja-build"
_uccl_need c++ "a C++17 compiler (build-essential)"

# Python packages: module name -> pip requirement. mpi4py only where MPI is installed.
_uccl_missing="$("$PYTHON" - <<'PY'
import importlib.util, shutil
need = {"pybind11": "pybind11", "scikit_build_core": "scikit-build-core", "numpy": "numpy",
        "pytest": "pytest", "pytest_timeout": "pytest-timeout", "ml_dtypes": "ml_dtypes"}
need.update({"ray": "ray==2.60.0", "jax": "jax==0.10.2 jaxlib==0.10.2"})  # embedding tests: Ray backend, JAX arrays
if shutil.which("mpicc"):
    need["mpi4py"] = "mpi4py"
print(" ".join(req for mod, req in need.items() if importlib.util.find_spec(mod) is None))
PY
)"
if [ -n "$_uccl_missing" ]; then
  echo "setup: installing $_uccl_missing"
  # shellcheck disable=SC2086
  "$PYTHON" -m pip install -q $_uccl_missing
fi
unset _uccl_missing
