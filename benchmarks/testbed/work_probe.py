"""Rank program: which algorithm the measured link rates pick, and is it the faster one.

    work_probe.py SIZE_MIB [time]

The world communicator runs one all_reduce of SIZE_MIB (its first collective: the link probe of
core/link_probe.h runs before it), and every rank reports the algorithm auto selection chose
and the link rates describe() shows. With "time", the same all_reduce is also timed with the
algorithm forced to ring and to hier (sub-communicators), so that the choice can be checked
against what actually ran faster. Each rank prints one RESULT line.
"""
import json
import re
import sys
import time

import numpy as np

import uccl


def timed(comm, x, iters=3):
    comm.all_reduce(x)  # warm-up (connections)
    comm.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.all_reduce(x)
    return (time.perf_counter() - t0) / iters


def main():
    nbytes = int(float(sys.argv[1]) * (1 << 20))
    world = uccl.init()
    x = np.ones(nbytes // 4 // world.size * world.size, np.float32)
    t0 = time.perf_counter()
    w = world.all_reduce(x, async_op=True)
    w.wait()
    first_s = time.perf_counter() - t0
    chosen = w.stats()["algorithm"]
    d = world.describe()
    links = re.search(r"links: (.*)", d).group(1)
    probe = re.search(r"probe: (.*)", d)
    res = {"rank": world.rank, "chosen": chosen, "links": links, "probe": probe.group(1) if probe else "",
           "first_op_s": first_s, "describe": d if world.rank == 0 else ""}
    if len(sys.argv) > 2 and sys.argv[2] == "time":
        for algo in ("ring", "hier"):
            c = world.split(0, algorithm=algo, name=algo)
            t = timed(c, x)
            res[f"{algo}_s"] = float(world.all_reduce(np.array([t]), op="max")[0])
    print("RESULT " + json.dumps(res), flush=True)
    world.barrier()


if __name__ == "__main__":
    main()
