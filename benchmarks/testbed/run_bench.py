"""Builds the testbed, measures, writes results JSON and RESULTS.md.

    sudo python benchmarks/testbed/run_bench.py [--sizes 1,4,16,64,256] [--intra 4] [--inter 0.5]
        [--torchrun] [--out benchmarks/testbed/results.json] [--md benchmarks/testbed/RESULTS.md]

2 clusters x 2 hosts x 2 ranks: busbw of hierarchical vs flat ring all_reduce / all_gather /
reduce_scatter, and the Holmes layout vs a naive one (gradient all_reduce time per step).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import launch  # noqa: E402
import report  # noqa: E402
from netbed import Testbed  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,4,16,64,256")
    ap.add_argument("--colls", default="all_reduce,all_gather,reduce_scatter")
    ap.add_argument("--intra", type=float, default=4.0)
    ap.add_argument("--inter", type=float, default=0.5)
    ap.add_argument("--queue-ms", type=int, default=200, help="tbf queue bound (20: tail drops under bursts)")
    ap.add_argument("--torchrun", action="store_true", help="launch ranks with torchrun (default: plain)")
    ap.add_argument("--grad-mib", type=float, default=64)
    ap.add_argument("--act-mib", type=float, default=1)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results.json"))
    ap.add_argument("--md", default=os.path.join(HERE, "RESULTS.md"))
    a = ap.parse_args()
    res = {"config": vars(a), "grid": [2, 2, 2]}
    with Testbed(clusters=2, hosts=2, intra_gbit=a.intra, inter_gbit=a.inter, queue_ms=a.queue_ms) as bed:
        topo = bed.topology_file(f"/tmp/{bed.prefix}-topo.json", ranks_per_host=2)
        kw = dict(topo_file=topo, torchrun=a.torchrun, timeout=1800)
        out = launch.run(bed, 2, [os.path.join(HERE, "work_bench.py"), a.sizes, a.colls, "ring,hier"], **kw)
        res["bench"] = out[0]["rows"]
        res["bench_inter_drops"] = bed.drops()
        res["holmes"] = []
        for layout in ("holmes", "naive"):
            r = launch.run(bed, 2, [os.path.join(HERE, "work_holmes.py"), layout, str(a.grad_mib), str(a.act_mib),
                                    str(a.microbatches), str(a.steps)], **kw)
            res["holmes"].append(r[0])
        os.remove(topo)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    with open(a.md, "w") as f:
        f.write(report.markdown(res))
    print(report.markdown(res))


if __name__ == "__main__":
    main()
