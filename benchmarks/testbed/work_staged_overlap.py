"""Rank program: does the staged pipeline overlap its device copies with the wire?

    work_staged_overlap.py SIZE_MIB

Measured in one run, on the testbed's shaped link (tbf: the wire costs time, not CPU, as a NIC's
does; over loopback on a 2-core machine the wire and the simulated device's copies fought for
the same CPUs, so no pipeline could show): the host all_reduce of SIZE_MIB (the wire), a copy of
the whole buffer to the simulated device at a copy speed set so that it takes about as long (the
copies), and the staged all_reduce of that buffer in simulated device memory (UCCL_STAGED=on,
chunks through pinned slots). Serial staging takes about wire + copy; a pipeline about the slower
of the two. Each rank prints one RESULT line with the three times (best of 3).
"""
import json
import sys
import time

import numpy as np

import uccl
import uccl.sim
from uccl.sim import SimArray


def best(comm, fn, reps=3):
    t = []
    for _ in range(reps):
        comm.barrier()
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def measure(world, count):
    """The three times (best of 3) and whether the staged result is right, on this communicator."""
    h = np.ones(count, np.float32)
    world.all_reduce(h)  # connections
    t_wire = best(world, lambda: world.all_reduce(h))
    # One agreed copy speed (the slower rank's wire), so both ranks' devices are alike.
    t_agreed = float(world.all_reduce(np.array([t_wire]), op="max")[0])
    ones = np.ones(count, np.float32)  # h holds sums by now
    d = SimArray.from_numpy(ones)
    uccl.sim.set_copy_speed(count * 4 / t_agreed / 1e9, 0)
    t_copy = best(world, lambda: d.copy_from(ones))
    world.all_reduce(d)
    t_staged = best(world, lambda: world.all_reduce(d))
    ok = bool(np.all(d.numpy() == world.size ** 4))  # four all_reduces of ones, each multiplying by size
    uccl.sim.set_copy_speed(0, 0)
    return {"wire": t_wire, "copy": t_copy, "staged": t_staged, "ok": ok}


def main():
    count = int(float(sys.argv[1]) * (1 << 20)) // 4
    world = uccl.init()
    res = measure(world, count)
    desc = [ln.strip() for ln in world.describe().splitlines() if ln.strip().startswith("peer ")]
    print("RESULT " + json.dumps({"rank": world.rank, **res, "peers": desc}), flush=True)
    world.barrier()


if __name__ == "__main__":
    main()
