#!/usr/bin/env bash
# The measurements behind benchmarks/RESULTS.md, in one go:
#   benchmarks/run_all.sh [results dir, default benchmarks/results]
# Each step first waits until the 1-minute load average is below $MAX_LOAD (default 1.5): on a
# small shared machine another engineer's compile would otherwise be measured instead of uccl.
# Environment: PYTHON (with uccl, torch, mpi4py installed), MAX_LOAD, ROUNDS, SKIP_NETNS=1.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$HERE/results}
PYTHON=${PYTHON:-python3}
MAX_LOAD=${MAX_LOAD:-1.5}
ROUNDS=${ROUNDS:-5}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
export TORCH_DEVICE_BACKEND_AUTOLOAD=0
mkdir -p "$OUT"
cd /  # a source checkout in the cwd would shadow the installed uccl

wait_quiet() {
  local waited=0
  while :; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    if $PYTHON -c "import sys; sys.exit(0 if $load < $MAX_LOAD else 1)"; then break; fi
    [ $((waited % 300)) -eq 0 ] && echo "# waiting for load < $MAX_LOAD (now $load)" >&2
    sleep 10
    waited=$((waited + 10))
  done
  echo "# $(date -Is) load $(cut -d' ' -f1-3 /proc/loadavg): $*" | tee -a "$OUT/run_all.log"
}

compare() {  # name nranks collective args...
  local name=$1 np=$2
  shift 2
  wait_quiet "compare $name"
  "${MPIRUN[@]}" -np "$np" "$PYTHON" "$HERE/compare.py" "$@" -R "$ROUNDS" --out "$OUT/$name" 2>&1 |
    grep -v "^\s*$" | tee "$OUT/$name.txt"
}

ALLREDUCE_SIZES=8,64,512,4K,32K,64K,256K,1M,4M,16M,64M,256M
BIG_SIZES=1M,4M,16M,64M,256M
compare allreduce_2r 2 all_reduce --sizes $ALLREDUCE_SIZES -n 10
compare allgather_2r 2 all_gather --sizes 64K,256K,$BIG_SIZES -n 10
compare reducescatter_2r 2 reduce_scatter --sizes 64K,256K,$BIG_SIZES -n 10
compare allreduce_4r 4 all_reduce --sizes 8,4K,64K,256K,$BIG_SIZES -n 10

if [ "${SKIP_NETNS:-0}" != 1 ]; then
  wait_quiet "two hosts"
  PYTHON=$PYTHON OUT=$OUT/two_hosts_allreduce "$HERE/two_hosts.sh" -b 1M -e 256M -f 4 -n 5 -w 2 2>&1 |
    tee "$OUT/two_hosts_allreduce.txt"
fi
