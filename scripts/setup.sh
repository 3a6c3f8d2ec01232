#!/usr/bin/env bash
# Set-up shared by scripts/test.sh, scripts/demo.sh and .ci/run (source it or run it).
#
# Installs what the build, the tests and the benchmarks need, on a fresh Debian 12 machine:
#   * system packages with apt-get, when apt-get is there and we are root (otherwise it names
#     the missing ones and goes on: the build then says what it lacks);
#   * Python packages with pip into $PYTHON's environment.
# Nothing is downloaded when everything is present (a fast no-op: dpkg-query and one Python
# start). To add a dependency, append it to the list of its kind below.
#
# Environment:
#   PYTHON            interpreter to use (default: python3)
#   UCCL_JOBS         parallel build jobs (default: 2; exported as CMAKE_BUILD_PARALLEL_LEVEL)
#   UCCL_SETUP_FUZZ=1 also install the libFuzzer toolchain (scripts/fuzz.sh; .ci/run sets it)
set -euo pipefail

UCCL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
UCCL_JOBS="${UCCL_JOBS:-2}"
export UCCL_ROOT PYTHON UCCL_JOBS
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$UCCL_JOBS}"

# --- the lists (one per kind) ----------------------------------------------------------------
# Debian packages for the build, the tests and the benchmarks.
UCCL_APT_PACKAGES=(
  build-essential cmake ninja-build git ca-certificates ccache  # the C++ core, ctest, rebuilds
  libyaml-cpp-dev nlohmann-json3-dev                             # topology files (YAML, JSON)
  doctest-dev                                                    # the C++ unit tests
  openmpi-bin libopenmpi-dev                                     # mpirun test, MPI baseline
  libibverbs-dev rdma-core                    # verbs headers; libibverbs is dlopen'ed at run time
  iproute2 iperf3                             # netns testbed, two-host benchmark
  nftables                                    # testbed: a lossy link (random drops; no netem in this kernel)
  pkg-config                                  # tests/test_capi.py: pkg-config uccl
  gdb                                         # tests/harness.py: a hung rank's native stacks
  libssl-dev                                  # job key HMAC, TLS on tcp links (UCCL_ENCRYPT)
  slurmctld slurmd slurm-client munge         # srun / sbatch tests on a one-node Slurm (scripts/slurm_local.sh)
)
# Debian packages for libFuzzer (scripts/fuzz.sh), only with UCCL_SETUP_FUZZ=1.
UCCL_APT_FUZZ_PACKAGES=(clang-14 libclang-rt-14-dev)
# Python packages as pip requirements ("name" or "name==version"). torch==2.13.0 resolves to
# the CPU wheel on this machine kind's disk; never a plain "torch". mpi4py is skipped where
# no MPI compiler is installed.
UCCL_PIP_PACKAGES=(
  torch==2.13.0
  pybind11 scikit-build-core numpy ml_dtypes    # the build and the Python package
  pytest pytest-timeout                         # the tests
  expecttest                                    # PyTorch's own distributed tests (scripts/torch_dist_suite.py)
  mpi4py matplotlib                             # MPI baseline, benchmark plots
  ray==2.60.0 jax==0.10.2 jaxlib==0.10.2        # embedding tests: Ray backend, JAX arrays
)

# --- system packages -------------------------------------------------------------------------
_uccl_apt=("${UCCL_APT_PACKAGES[@]}")
[ "${UCCL_SETUP_FUZZ:-0}" = 1 ] && _uccl_apt+=("${UCCL_APT_FUZZ_PACKAGES[@]}")
if command -v dpkg-query >/dev/null 2>&1; then
  _uccl_have=" $( (dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${_uccl_apt[@]}" \
    2>/dev/null || true) | awk '$2 == "installed" { printf "%s ", $1 }')"
  _uccl_missing=""
  for _uccl_p in "${_uccl_apt[@]}"; do
    case "$_uccl_have" in *" $_uccl_p "*) ;; *) _uccl_missing="$_uccl_missing $_uccl_p" ;; esac
  done
  _uccl_missing="${_uccl_missing# }"
  if [ -n "$_uccl_missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "setup: apt-get install $_uccl_missing"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq
      # shellcheck disable=SC2086
      apt-get install -y -qq --no-install-recommends $_uccl_missing >/dev/null
    else
      echo "setup: missing system packages (install them as root): $_uccl_missing" >&2
    fi
  fi
  unset _uccl_missing _uccl_have _uccl_p
fi
unset _uccl_apt

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

# --- Python packages -------------------------------------------------------------------------
# A requirement is met when its distribution is installed (at the pinned version, local labels
# such as "+cpu" aside).
_uccl_missing="$("$PYTHON" - "${UCCL_PIP_PACKAGES[@]}" <<'PY'
import importlib.metadata as md, shutil, sys
missing = []
for req in sys.argv[1:]:
    name, _, want = req.partition("==")
    if name == "mpi4py" and not shutil.which("mpicc"):
        continue
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        missing.append(req)
        continue
    if want and have.split("+")[0] != want:
        missing.append(req)
print(" ".join(missing))
PY
)"
if [ -n "$_uccl_missing" ]; then
  echo "setup: pip install $_uccl_missing"
  # shellcheck disable=SC2086
  "$PYTHON" -m pip install -q $_uccl_missing
fi
unset _uccl_missing
