#!/usr/bin/env bash
# Builds the C++ core and its tests with sanitizers and runs them.
#   scripts/sanitizers.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer (CI runs this)
#   scripts/sanitizers.sh tsan   ThreadSanitizer over every C++ test (CI runs this too)
# The whole-stack test (tests/cpp/communicator_test.cc) runs ranks as threads on purpose, so
# that the progress thread, waiters and abort() race under the sanitizer's eyes; the simulated
# device's stream workers and copy-engine turns (sim_device_test), the staged slots' bells
# (staged_slots_test) and the shm doorbell (shm_doorbell_test) race there too. All 34 tests took
# ~130 s under TSan on the 2-core machine (2026-12-03), one at a time.
# UCCL_BUILD_ONLY=1: build, run nothing (.ci/run builds this tree at idle priority while the
# README's test command runs, then runs the tests here).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-asan}
case "$kind" in
  asan) flags="-DUCCL_SANITIZE=ON"; export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ;;
  tsan) flags="-DUCCL_TSAN=ON"; export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ;;
  *) echo "usage: $0 asan|tsan" >&2; exit 2 ;;
esac
build=build/$kind
cmake -S . -B "$build" -G Ninja -DUCCL_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Debug $flags >/dev/null
cmake --build "$build" -j2
[ "${UCCL_BUILD_ONLY:-0}" = 1 ] && { echo "$kind: built"; exit 0; }
if [ "$kind" = tsan ]; then
  # One at a time: TSan's shadow memory and slowdown make parallel runs miss their timeouts.
  ctest --test-dir "$build" --output-on-failure -j1 --timeout 600
else
  ctest --test-dir "$build" --output-on-failure
fi
echo "$kind: clean"
