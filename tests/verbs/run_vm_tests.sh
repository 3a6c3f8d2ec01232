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
OUT=$BUILD/vmtest
mkdir -p "$OUT"

if [[ ! -f $BUILD/CMakeCache.txt ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DUCCL_BUILD_TESTS=ON >/dev/null
fi
SAN=()
grep -q '^UCCL_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" && SAN=(-fsanitize=address,undefined -fno-omit-frame-pointer)
cmake --build "$BUILD" -j2 >/dev/null

if nm -D --undefined-only "$BUILD/libuccl.so" | grep -q ' ibv_'; then
  echo "FAIL: libuccl.so has link-time ibv_ symbols:"; nm -D --undefined-only "$BUILD/libuccl.so" | grep ' ibv_'
  exit 1
fi
grep -q 'UCCL_BUILT_VERBS "ON"' "$BUILD/generated/build_info.h" || { echo "SKIP: built without verbs"; exit 0; }

# doctest (Debian doctest-dev) from the host's /usr/include: the VM shares the host's root.
# Compiled again only when a source, a test header or libuccl.so is newer than the binary.
EXE=$OUT/verbs_transport_vmtest
SRCS=(tests/cpp/verbs/verbs_transport_vmtest.cc tests/cpp/verbs/verbs_vmtest_failures.cc
      tests/cpp/verbs/verbs_stripe_vmtest.cc tests/cpp/doctest_main.cc)
if [[ ! -x $EXE ]] || [[ -n $(find tests/cpp tests/cpp/verbs -maxdepth 1 -name "*.h" -newer "$EXE") ]] ||
   [[ $BUILD/libuccl.so -nt $EXE ]] || [[ -n $(find "${SRCS[@]}" -newer "$EXE") ]]; then
  g++ -std=c++17 -O2 -g -Wall -Wextra "${SAN[@]}" -Iinclude -Icpp -I. -Itests/cpp -I"$BUILD/generated" -DUCCL_HAVE_VERBS=1 \
    "${SRCS[@]}" -L"$BUILD" -luccl -Wl,-rpath,"$BUILD" -o "$EXE"
fi
[ "${UCCL_BUILD_ONLY:-0}" = 1 ] && { echo "verbs vm tests: built"; exit 0; }

echo "== running in vm-run (Soft-RoCE; ~1-2 minutes)"
"$VM_RUN" --timeout 900 -- "$EXE" "$@"
