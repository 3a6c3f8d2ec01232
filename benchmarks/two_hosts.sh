#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair whose both
# directions are capped with tc tbf, one uccl rank in each (so they talk tcp, never shm: uccl's
# host id includes the netns). Reports uccl-perf's busbw as a fraction of the capped line rate
# and of what iperf3 and a plain socket stream achieve on the same link.
#
#   sudo benchmarks/two_hosts.sh                       # all_reduce 1M..256M at 2 Gbit/s
#   RATE=1gbit COLL=all_gather benchmarks/two_hosts.sh -b 1M -e 64M -f 4
#
# Environment: RATE (tc rate, default 2gbit), COLL (default all_reduce), PYTHON (default
# python3), OUT (write <OUT>.log/.json), MTU (veth MTU, default 1500). Extra arguments go to
# uccl-perf. Needs root (ip netns, tc). Only 10.201.0.1/.2 inside namespaces it creates is
# used, and everything is torn down on exit, whatever happens.
set -euo pipefail

RATE=${RATE:-2gbit}
COLL=${COLL:-all_reduce}
PYTHON=${PYTHON:-python3}
MTU=${MTU:-1500}
OUT=${OUT:-}
NS1=uccl-h1-$$
NS2=uccl-h2-$$
A=10.201.0.1
B=10.201.0.2
PIDS=()

cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  ip netns del "$NS1" 2>/dev/null || true
  ip netns del "$NS2" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

ip netns add "$NS1"
ip netns add "$NS2"
ip link add veth-h1 netns "$NS1" type veth peer name veth-h2 netns "$NS2"
ip -n "$NS1" addr add $A/24 dev veth-h1
ip -n "$NS2" addr add $B/24 dev veth-h2
for ns in "$NS1" "$NS2"; do
  dev=$([ "$ns" = "$NS1" ] && echo veth-h1 || echo veth-h2)
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "$dev" mtu "$MTU" up
  # Egress cap on each end = both directions capped. burst >= rate/HZ so tbf can reach the
  # rate at all; a short queue (latency) like a switch port's.
  tc -n "$ns" qdisc add dev "$dev" root tbf rate "$RATE" burst 1mb latency 20ms
done

rate_bps=$($PYTHON - "$RATE" <<'EOF'
import re, sys
m = re.fullmatch(r"([\d.]+)\s*([kmg]?)(bit|bps)", sys.argv[1].lower())
v = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
print(int(v if m.group(3) == "bit" else v * 8))
EOF
)
echo "# two hosts: netns $NS1 ($A) <-> $NS2 ($B), veth mtu $MTU, tbf $RATE each way ($rate_bps bit/s)"
echo "# UCCL_ENCRYPT=${UCCL_ENCRYPT:-none}${UCCL_JOB_KEY:+, job key set}; load: $(cut -d' ' -f1-3 /proc/loadavg)"

# --- what the link gives a plain TCP stream (both directions at once, like a ring) -----------
ip netns exec "$NS2" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.5
iperf_json=$(ip netns exec "$NS1" iperf3 -c $B -p 5201 -t 5 --bidir -J 2>/dev/null || true)
iperf_bps=$(echo "$iperf_json" | $PYTHON -c '
import json, sys
try:
    d = json.load(sys.stdin)["end"]
    print(int(min(d["sum_sent"]["bits_per_second"], d["sum_sent_bidir_reverse"]["bits_per_second"])))
except Exception:
    print(0)')
echo "# iperf3 --bidir, 1 stream each way: $iperf_bps bit/s per direction ($($PYTHON -c "print(f'{$iperf_bps/$rate_bps:.1%}')") of the cap)"

HERE=$(cd "$(dirname "$0")" && pwd)
ip netns exec "$NS2" $PYTHON "$HERE/socket_stream.py" server $B 5301 &
PIDS+=($!)
sleep 0.5
sock_bps=$(ip netns exec "$NS1" $PYTHON "$HERE/socket_stream.py" client $B 5301 5)
echo "# plain socket stream (python, both directions at once): $sock_bps bit/s per direction ($($PYTHON -c "print(f'{$sock_bps/$rate_bps:.1%}')") of the cap)"

# --- uccl-perf, one rank per namespace ---------------------------------------------------------
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(-b 1M -e 256M -f 2 -n 5 -w 2)
json=$(mktemp --suffix .json)  # busbw at full precision (the table rounds to 0.01 GB/s)
run_rank() {  # ns rank [json]   (from /: a source checkout in the cwd would shadow the install)
  cd / && ip netns exec "$1" env RANK=$2 WORLD_SIZE=2 MASTER_ADDR=$A MASTER_PORT=29611 UCCL_SOCKET_IFNAME=veth \
    $PYTHON -m uccl.perf "$COLL" "${args[@]}" ${3:+-J "$3"}
}
run_rank "$NS2" 1 >/dev/null &
PIDS+=($!)
log=$(mktemp)
run_rank "$NS1" 0 "$json" | tee "$log"
wait "${PIDS[-1]}"

# --- busbw as a fraction of the cap and of iperf3 -----------------------------------------------
$PYTHON - "$json" "$rate_bps" "$iperf_bps" "$sock_bps" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
cap, iperf, sock = map(float, sys.argv[2:])
pct = lambda x, ref: "%8.1f%%" % (100 * x / ref) if ref else "%9s" % "n/a"
print("#\n# out-of-place busbw (1 GB/s = 8 Gbit/s)")
print("# %12s  %10s  %10s  %9s  %9s  %9s" % ("size(B)", "busbw GB/s", "Gbit/s", "of cap", "of iperf3", "of socket"))
for r in doc["results"]:
    bus = r["out_of_place"]["busbw"] * 8e9
    print("  %12d  %10.4f  %10.3f  %s  %s  %s" % (r["size"], bus / 8e9, bus / 1e9, pct(bus, cap), pct(bus, iperf),
                                                   pct(bus, sock)))
EOF
# Drops mean the tbf queue (latency 20ms) overflowed and TCP backed off below the rate.
for ns in "$NS1" "$NS2"; do
  echo "# $ns: tbf $(tc -n "$ns" -s qdisc show | grep -A1 ' tbf ' | grep -o 'Sent.*'); tcp" \
    "$(ip netns exec "$ns" nstat -az TcpRetransSegs TcpExtTCPTimeouts TcpExtTCPLossProbes 2>/dev/null |
      awk 'NR>1 {printf "%s %s ", $1, $2}')"
done
if [ -n "$OUT" ]; then cp "$log" "$OUT.log"; cp "$json" "$OUT.json"; fi
rm -f "$log" "$json"
