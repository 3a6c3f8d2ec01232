"""Rank program: where the bytes go. Per collective and algorithm, this rank's bytes per topology
level (uccl's counters) and, on rank 0, the bed's inter-cluster link counters (tc/bridge TX
bytes in the router namespace) around the operation.

    work_levels.py world  COUNT   # ring and hier all_gather / reduce_scatter / all_reduce
    work_levels.py group  COUNT   # all_reduce inside each cluster's own group (split by cluster)
"""
import json
import os
import subprocess
import sys

import numpy as np

import uccl


def inter_cluster_tx():
    router, n = os.environ.get("TESTBED_ROUTER"), int(os.environ.get("TESTBED_CLUSTERS", "0"))
    total = 0
    for c in range(n):
        out = subprocess.run(["ip", "-n", router, "-s", "-j", "link", "show", f"br{c}"], capture_output=True,
                             text=True, check=True).stdout
        total += int(json.loads(out)[0]["stats64"]["tx"]["bytes"])
    return total


def measured(world, comm, fn):
    """Runs fn() on comm between world barriers; returns (stats, inter-cluster TX delta on rank 0)."""
    world.barrier()
    before = inter_cluster_tx() if world.rank == 0 else 0
    world.barrier()
    w = fn(comm)
    w.wait()
    st = w.stats()
    world.barrier()
    delta = inter_cluster_tx() - before if world.rank == 0 else 0
    return st, delta


def ops(count, size):
    x = np.ones(count, dtype=np.float32)
    big = np.ones(count * size, dtype=np.float32)
    return {
        "all_gather": lambda c: c.all_gather(x, async_op=True),
        "reduce_scatter": lambda c: c.reduce_scatter(big, async_op=True),
        "all_reduce": lambda c: c.all_reduce(big.copy(), async_op=True),
    }


def main():
    mode, count = sys.argv[1], int(sys.argv[2])
    world = uccl.init()
    rank, size = world.rank, world.size
    out = {"rank": rank, "size": size, "cluster": int(os.environ.get("TESTBED_CLUSTER", "0")), "runs": []}
    if mode == "world":
        comms = {a: world.split(0, algorithm=a, name=a) for a in ("ring", "hier")}
        for algo, c in comms.items():
            for name, fn in ops(count, size).items():
                st, delta = measured(world, c, fn)
                out["runs"].append({"algo": algo, "coll": name, "algorithm": st["algorithm"],
                                    "levels": dict(st["bytes_sent_by_level"]), "tc_inter": delta})
    else:
        cid = out["cluster"]
        group = world.split(cid, name=f"cluster{cid}")
        for algo in ("auto", "ring", "hier"):
            g = group.split(0, algorithm=algo)
            st, delta = measured(world, g, lambda c: c.all_reduce(np.ones(count * g.size, np.float32),
                                                                  async_op=True))
            out["runs"].append({"algo": algo, "coll": "all_reduce", "algorithm": st["algorithm"],
                                "levels": dict(st["bytes_sent_by_level"]), "tc_inter": delta})
        out["describe"] = group.describe()
    print("RESULT " + json.dumps(out), flush=True)
    world.barrier()


if __name__ == "__main__":
    main()
