#!/bin/bash
# Builds the verbs VM tests against build/dev/libuccl.so and runs them on Soft-RoCE inside
# ../shared/rxe/vm-run (rxe0 <-> rxe1 across a veth pair, and rxe0 loopback).
#
#   tests/verbs/run_vm_tests.sh            from the worktree root (builds build/dev if needed)
#   VM_RUN=/path/to/vm-run tests/verbs/run_vm_tests.sh
#   BUILD=build/asan tests/verbs/run_vm_tests.sh   a build configured with -DUCCL_SANITIZE=ON:
#                                                  the test is then built with the sanitizers too
#
# The binary is built on the host (the VM compiles ~10x slower), without -march=native (the
# VM's emulated CPU lacks AVX-512). It also checks that libuccl.so links no ibv_* symbol:
# libibverbs must stay a dlopen() at run time.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
VM_RUN=${VM_RUN:-$ROOT/../shared/rxe/vm-run}
BUILD=$(cd "$ROOT" && mkdir -p "${BUILD:-build/dev}" && cd "${BUILD:-build/dev}" && pwd)

if [[ ! -f $BUILD/CMakeCache.txt ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DUCCL_BUILD_TESTS=ON >/dev/null
fi
cmake --build "$BUILD" -j2 >/dev/null

if nm -D --undefined-only "$BUILD/libuccl.so" | grep -q ' ibv_'; then
  echo "FAIL: libuccl.so has link-time ibv_ symbols:"; nm -D --undefined-only "$BUILD/libuccl.so" | grep ' ibv_'
  exit 1
fi
grep -q 'UCCL_BUILT_VERBS "ON"' "$BUILD/generated/build_info.h" || { echo "SKIP: built without verbs"; exit 0; }

# The test binary is a CMake target of the same build (tests/cpp/CMakeLists.txt): its flags,
# sanitizers included, and its dependencies are the build's.
cmake --build "$BUILD" -j2 --target verbs_transport_vmtest >/dev/null
EXE=$BUILD/tests/cpp/verbs_transport_vmtest
[ "${UCCL_BUILD_ONLY:-0}" = 1 ] && { echo "verbs vm tests: built"; exit 0; }

echo "== running in vm-run (Soft-RoCE; ~1-2 minutes)"
"$VM_RUN" --timeout 900 -- "$EXE" "$@"
