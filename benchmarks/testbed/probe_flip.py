"""The algorithm choice following the measured link rates, with no topology file.

    python benchmarks/testbed/probe_flip.py [--intra 0.5] [--inter 0.15,0.5] [--size 16] [--time]

For each inter-cluster rate, a testbed of 2 clusters x 2 hosts (1 rank per host, UCCL_CLUSTER
labels, no UCCL_TOPO_FILE) runs work_probe.py twice: UCCL_PROBE=off (the rates the interfaces
report: veth says 10 Gbit/s, the uplink unknown) and UCCL_PROBE=auto (measured). Prints the
rates each run used and the algorithm it chose; with --time also the ring and hier times.
The cost model (cpp/topology/cost_model.h) picks ring when the uplink is about as fast as a host
link (0.3-0.9 x 2 NICs for this shape at 0.5 Gbit/s) and hier when it is much slower.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import launch  # noqa: E402
from netbed import Testbed  # noqa: E402


def run_case(intra, inter, size_mib, probe, timing):
    with Testbed(clusters=2, hosts=2, intra_gbit=intra, inter_gbit=inter) as bed:
        argv = [os.path.join(HERE, "work_probe.py"), str(size_mib)] + (["time"] if timing else [])
        res = launch.run(bed, 1, argv, env={"UCCL_PROBE": probe, "UCCL_PROBE_CACHE_S": "0"},
                         cluster_labels=True, timeout=600)
    chosen = {r["chosen"] for r in res}
    assert len(chosen) == 1, f"ranks disagree: {[(r['rank'], r['chosen']) for r in res]}"
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--intra", type=float, default=0.5)
    ap.add_argument("--inter", default="0.15,0.5")
    ap.add_argument("--size", type=float, default=16)
    ap.add_argument("--time", action="store_true")
    a = ap.parse_args()
    rows = []
    for inter in [float(v) for v in a.inter.split(",")]:
        for probe in ("off", "auto"):
            res = run_case(a.intra, inter, a.size, probe, a.time)
            r0 = res[0]
            row = {"intra_gbit": a.intra, "inter_gbit": inter, "probe": probe, "chosen": r0["chosen"],
                   "links": r0["links"], "probe_line": r0["probe"], "first_op_s": max(r["first_op_s"] for r in res)}
            if a.time:
                row.update(ring_s=r0["ring_s"], hier_s=r0["hier_s"])
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    main()
