#!/usr/bin/env bash
# Builds the libFuzzer targets (clang + ASan/UBSan) and runs each for a while.
#   scripts/fuzz.sh [seconds-per-target]     (CI uses a short run; benchmarks use longer ones)
# Needs clang-14 (apt-get install clang-14 libclang-rt-14-dev).
# UCCL_BUILD_ONLY=1: build the targets, run nothing (.ci/run: see scripts/sanitizers.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
build=build/fuzz
CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DUCCL_FUZZ=ON -DUCCL_BUILD_TESTS=OFF \
  -DUCCL_WITH_VERBS=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$build" -j2 --target fuzz_handshake fuzz_tcp_stream fuzz_peer_info fuzz_auth fuzz_agreement
[ "${UCCL_BUILD_ONLY:-0}" = 1 ] && { echo "fuzz: built"; exit 0; }
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# Seeds: a well-formed hello (wrong secret) so mutations start past the magic and version, and
# one with the harness's secret, so every run sets up an admitted connection (which the fuzzer
# otherwise reaches only sometimes: a 10 s store wait on that path once failed CI).
mkdir -p "$build/corpus/fuzz_handshake"
python3 - "$build/corpus/fuzz_handshake" <<'PY'
import os, struct, sys
for name, secret in (("hello", b"\x11" * 16), ("hello_secret", b"\x5a" * 16)):
    hello = struct.pack("<IHBB16sQiiIIIQ", 0x4C434355, 2, 0, 0, secret, 0x5A5A5A5A5A5A5A5A, 0, 1, 0, 1, 4, 0) + b"tcp1"
    open(os.path.join(sys.argv[1], name), "wb").write(hello)
PY
# fuzz_auth (job key): a store client's AuthHello and a keyed hello, so mutations start past
# the magics (first byte: even = store port, odd = rank port).
mkdir -p "$build/corpus/fuzz_auth"
python3 - "$build/corpus/fuzz_auth" <<'PY'
import os, struct, sys
d = sys.argv[1]
open(os.path.join(d, "store_auth"), "wb").write(b"\x00" + struct.pack("<II", 0x41534355, 1) + b"\x22" * 32 +
                                                 struct.pack("<II", 0x50534355, 0) + b"\x33" * 32)
open(os.path.join(d, "store_get"), "wb").write(b"\x02" + struct.pack("<IB3xqII", 0x54534355, 2, 10, 1, 0) +
                                                struct.pack("<I", 6) + b"canary")
hello = struct.pack("<IHBB16sQiiIIIQ", 0x4C434355, 2, 0, 0, b"\x11" * 16, 0x5A5A5A5A5A5A5A5A, 0, 1, 0, 1, 4, 0)
open(os.path.join(d, "rank_hello"), "wb").write(b"\x01" + hello + b"\x44" * 32 + b"tcp1")
PY
# fuzz_agreement (shrink): a proposal body, so mutations start from the known keys.
mkdir -p "$build/corpus/fuzz_agreement"
printf 'ballot 3 1\ninstance 1\ndecision 3 1\nfailed 0 2\nstore 127.0.0.1:4000\nprefix uccl/shrink/1.3.1/\n' \
  >"$build/corpus/fuzz_agreement/accept"
printf 'ballot 3 1\nok 1\npromised 3 1\n' >"$build/corpus/fuzz_agreement/reply"
targets=(fuzz_peer_info fuzz_handshake fuzz_tcp_stream fuzz_auth fuzz_agreement)
declare -A rc
# Two at a time: a fuzzer is one process, the machine has two cores.
for ((i = 0; i < ${#targets[@]}; i += 2)); do
  declare -A pid=()
  for t in "${targets[@]:i:2}"; do
    echo "== $t for ${secs}s"
    mkdir -p "$build/corpus/$t"
    "$build/tests/fuzz/$t" -max_total_time="$secs" -max_len=4096 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$build/" "$build/corpus/$t" >"$build/$t.log" 2>&1 &
    pid[$t]=$!
  done
  for t in "${!pid[@]}"; do
    rc[$t]=0
    wait "${pid[$t]}" || rc[$t]=$?
  done
done
failed=0
for t in "${targets[@]}"; do
  echo "-- $t"
  grep -E "^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added)" "$build/$t.log" || true
  if [ "${rc[$t]}" != 0 ]; then
    tail -40 "$build/$t.log"
    echo "fuzz: $t FAILED (artifact in $build/)" >&2
    failed=1
  fi
done
[ "$failed" = 0 ] || exit 1
echo "fuzz: no crashes"
