#!/bin/bash
# uccl verbs point-to-point vs perftest (ib_write_bw / ib_write_lat), rxe0 -> rxe1, in ONE vm-run.
#
#   benchmarks/verbs/p2p_vs_perftest.sh [--qps N] [--secs S]     from the worktree root
#
# Builds verbs_p2p_bench on the host against build/dev/libuccl.so, boots the VM once, and runs,
# for each size, ib_write_bw then the uccl endpoint (interleaved, so host noise hits both alike),
# then ib_write_lat and the uccl ping-pong at 8 bytes. Prints a table with uccl / perftest.
# Goal: >= 80% of ib_write_bw at >= 1 MiB. MB = 2^20 bytes (perftest's unit).
# Extra environment for the VM (e.g. VM_RUN_MTU=9000, VM_RUN_CPU=Nehalem) passes through.
# ROUNDS (default 3) repeats everything, interleaved, and reports each tool's best and median:
# the host is shared and TCG-emulated, so single runs swing by 2x or more. The uccl side uses the same ack
# timeout as perftest (UCCL_IB_TIMEOUT=14, perftest's default): with Soft-RoCE over veth a lost
# packet costs one timeout, and UCCL's default (18, ~1 s) would measure the timer, not the path.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SIZES=${SIZES:-65536,1048576,4194304}
QPS=1 SECS=3
while [[ $# -gt 0 ]]; do
  case $1 in
    --qps) QPS=$2; shift 2 ;;
    --secs) SECS=$2; shift 2 ;;
    --inner) INNER=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

if [[ ${INNER:-0} != 1 ]]; then
  cd "$ROOT"
  BUILD=$ROOT/build/dev OUT=$ROOT/build/vmtest
  mkdir -p "$OUT"
  [[ -f $BUILD/libuccl.so ]] || cmake -S . -B "$BUILD" -G Ninja -DUCCL_BUILD_TESTS=ON >/dev/null
  cmake --build "$BUILD" -j2 >/dev/null
  g++ -std=c++17 -O2 -Wall -Iinclude -Icpp -I. -Itests/cpp/verbs -I"$BUILD/generated" -DUCCL_HAVE_VERBS=1 \
    benchmarks/verbs/verbs_p2p_bench.cc -L"$BUILD" -luccl -Wl,-rpath,"$BUILD" -o "$OUT/verbs_p2p_bench"
  exec "${VM_RUN:-$ROOT/../shared/rxe/vm-run}" --timeout 1200 -- \
    "$ROOT/benchmarks/verbs/p2p_vs_perftest.sh" --inner --qps "$QPS" --secs "$SECS"
fi

# ---- inside the VM ---------------------------------------------------------------------------
BENCH=$ROOT/build/vmtest/verbs_p2p_bench
T=$(mktemp -d /dev/shm/p2p.XXXXXX)
# perftest pair (as in ../shared/rxe/examples/selftest.sh): server on rxe1, client on rxe0.
pt() {
  local tool=$1; shift
  local port=$((18515 + RANDOM % 1000)) s rc=1
  "$tool" -d rxe1 -x 1 -p $port -F "$@" >"$T/srv.log" 2>&1 & s=$!
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    sleep 1
    timeout 120 "$tool" -d rxe0 -x 1 -p $port -F "$@" 10.77.0.2 >"$T/cli.log" 2>&1; rc=$?
    grep -q "Couldn't connect\|Unable to open file descriptor" "$T/cli.log" || break
  done
  wait $s || true
  [[ $rc == 0 ]] || { cat "$T/cli.log" "$T/srv.log" >&2; return 1; }
  grep -E '^ *[0-9]+ +[0-9]+ ' "$T/cli.log" | tail -1
}

export UCCL_IB_TIMEOUT=${UCCL_IB_TIMEOUT:-14}
ROUNDS=${ROUNDS:-3}
# stats "v1 v2 ..." -> "best median" (best = max for bandwidth, min for latency: $2 = max|min).
# Failed runs (empty, 0.00, inf, nan: perftest prints those when a run stalls) are left out.
stats() { tr ' ' '\n' <<<"$1" | grep -E '^[0-9.]+$' | grep -vE '^0*\.?0*$' | sort -g | awk -v m="$2" '{v[NR]=$1}
  END { if (!NR) { print "n/a n/a"; exit } b = (m == "max") ? v[NR] : v[1];
        med = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "%s %.2f\n", b, med }'; }
declare -A PT_BW UC_BW
PT_LAT_TYP="" PT_LAT_AVG="" UC_LAT_TYP="" UC_LAT_AVG=""
echo "# rxe0 -> rxe1, $(cat /sys/class/net/veth0/mtu)-byte veth MTU, uccl: $QPS QP(s), UCCL_IB_TIMEOUT=$UCCL_IB_TIMEOUT"
for round in $(seq "$ROUNDS"); do
  for s in ${SIZES//,/ }; do
    line=$(pt ib_write_bw -s "$s" -D "$SECS") || line=""
    v=$(awk '{print $4}' <<<"$line"); PT_BW[$s]+=" $v"
    echo "round $round ib_write_bw  $s: ${v:-failed} MB/s"
    line=$("$BENCH" bw "$s" --hca0 =rxe0 --hca1 =rxe1 --qps "$QPS" --secs "$SECS" | grep '^RESULT') || line=""
    v=$(awk '{print $4}' <<<"$line"); UC_BW[$s]+=" $v"
    echo "round $round uccl verbs   $s: ${v:-failed} MB/s"
  done
  # ib_write_lat columns: #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
  line=$(pt ib_write_lat -s 8 -n 2000) || line=""
  PT_LAT_TYP+=" $(awk '{print $5}' <<<"$line")"; PT_LAT_AVG+=" $(awk '{print $6}' <<<"$line")"
  echo "round $round ib_write_lat 8: $(awk '{print $5, $6}' <<<"$line") us (typical, avg)"
  line=$("$BENCH" lat 8 --hca0 =rxe0 --hca1 =rxe1 --qps "$QPS" --iters 2000 | grep '^RESULT') || line=""
  UC_LAT_TYP+=" $(awk '{print $4}' <<<"$line")"; UC_LAT_AVG+=" $(awk '{print $5}' <<<"$line")"
  echo "round $round uccl lat     8: $(awk '{print $4, $5}' <<<"$line") us (typical, avg)"
done

echo
echo "| size | ib_write_bw MB/s best / median | uccl verbs MB/s best / median | uccl / perftest (best, median) |"
echo "| ---: | ---: | ---: | ---: |"
for s in ${SIZES//,/ }; do
  read -r pb pm <<<"$(stats "${PT_BW[$s]}" max)"; read -r ub um <<<"$(stats "${UC_BW[$s]}" max)"
  r=$(awk -v ub="$ub" -v pb="$pb" -v um="$um" -v pm="$pm" \
      'BEGIN{ if (pb+0 > 0 && pm+0 > 0) printf "%.0f%%, %.0f%%", 100*ub/pb, 100*um/pm; else print "n/a" }')
  echo "| $s | $pb / $pm | $ub / $um | $r |"
done
echo
echo "| 8 B one-way latency, us (best / median of $ROUNDS) | ib_write_lat | uccl verbs ping-pong / 2 |"
echo "| --- | ---: | ---: |"
read -r a b <<<"$(stats "$PT_LAT_TYP" min)"; read -r c d <<<"$(stats "$UC_LAT_TYP" min)"
echo "| typical (median of the run) | $a / $b | $c / $d |"
read -r a b <<<"$(stats "$PT_LAT_AVG" min)"; read -r c d <<<"$(stats "$UC_LAT_AVG" min)"
echo "| average of the run | $a / $b | $c / $d |"
rm -rf "$T"
