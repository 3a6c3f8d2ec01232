#!/usr/bin/env bash
# The cost of TLS on a tcp link (issue 17 item 5): benchmarks/two_hosts.sh at one size with and
# without UCCL_ENCRYPT=all, alternately (the machine is shared: a noisy moment hits both), with
# the load average before every run and which TLS (kernel or user space) this host offers.
#
#   sudo benchmarks/tls_cost.sh                  # 3 pairs of runs, all_reduce 64 MiB, 2 Gbit/s cap
#   ROUNDS=5 RATE=20gbit SIZE=64M benchmarks/tls_cost.sh
#
# Environment: ROUNDS (3), SIZE (64M), RATE (2gbit), PYTHON (python3), OUT (write OUT.txt).
# Needs root (two_hosts.sh: ip netns, tc).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-64M}
PYTHON=${PYTHON:-python3}
export RATE=${RATE:-2gbit} PYTHON
export UCCL_JOB_KEY=${UCCL_JOB_KEY:-tls-cost-benchmark-key-0123456789}
summary=$(mktemp)
(cd / && $PYTHON -c 'import uccl; s = uccl._core.security_info(); print("#", s["encryption"].split("; ", 1)[1])') | tee "$summary"
echo "# all_reduce $SIZE, tbf $RATE, $ROUNDS rounds alternating (job key set in both modes)" | tee -a "$summary"
for r in $(seq 1 "$ROUNDS"); do
  for mode in none all; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    line=$(OUT= UCCL_ENCRYPT=$mode bash "$HERE/two_hosts.sh" -b "$SIZE" -e "$SIZE" -f 2 -n 5 -w 2 | awk '$1 ~ /^[0-9]+$/ && NF >= 6 {print}' | tail -1)
    echo "round $r encrypt=$mode load=$load: $line" | tee -a "$summary"
  done
done
$PYTHON - "$summary" <<'PY'
import re, statistics, sys
rows = {"none": [], "all": []}
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ encrypt=(\w+) load=[\d.]+:\s+\d+\s+[\d.]+\s+([\d.]+)", line)
    if m:
        rows[m.group(1)].append(float(m.group(2)))
if rows["none"] and rows["all"]:
    a, b = statistics.median(rows["none"]), statistics.median(rows["all"])
    print(f"# median busbw: plain {a:.3f} Gbit/s, TLS {b:.3f} Gbit/s: TLS keeps {b / a:.1%}")
    print(f"# per round (Gbit/s): plain {rows['none']}, TLS {rows['all']}")
PY
[ -n "${OUT:-}" ] && cp "$summary" "$OUT.txt"
rm -f "$summary"
