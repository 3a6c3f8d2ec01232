"""Rank program: busbw of all_reduce / all_gather / reduce_scatter, hierarchical vs flat ring.

    work_bench.py SIZES_MIB COLLS ALGOS     e.g. 1,4,16 all_reduce,all_gather ring,hier

Sizes are nccl-tests' "size": the all_reduce buffer, the all_gather output, the reduce_scatter
input (D). Time per op is the slowest rank's mean over the iterations; busbw factors: all_reduce
2(n-1)/n, all_gather and reduce_scatter (n-1)/n. Rank 0 prints one RESULT line.
"""
import json
import sys
import time

import numpy as np

import uccl

FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
          "reduce_scatter": lambda n: (n - 1) / n}


def iters_for(nbytes):
    return max(2, min(20, (64 << 20) // max(nbytes, 1)))


def main():
    sizes = [int(float(s) * (1 << 20)) for s in sys.argv[1].split(",")]
    colls, algos = sys.argv[2].split(","), sys.argv[3].split(",")
    world = uccl.init()
    n = world.size
    comms = {a: world.split(0, algorithm=a, name=a) for a in algos}
    rows = []
    for D in sizes:
        count = D // 4 // n * n  # float32, divisible by n
        big, out = np.ones(count, np.float32), np.empty(count, np.float32)
        small = np.ones(count // n, np.float32)
        for coll in colls:
            for algo, c in comms.items():
                def op():
                    if coll == "all_reduce":
                        return c.all_reduce(big)
                    if coll == "all_gather":
                        return c.all_gather(small, out=out)
                    return c.reduce_scatter(big, out=small)
                op()  # warm-up: connections, scratch memory
                it = iters_for(D)
                world.barrier()
                t0 = time.perf_counter()
                for _ in range(it):
                    op()
                mine = np.array([(time.perf_counter() - t0) / it])
                t = float(world.all_reduce(mine, op="max")[0])
                algbw = count * 4 / t
                rows.append({"coll": coll, "algo": algo, "bytes": count * 4, "time_s": t, "iters": it,
                             "algbw_GBps": algbw / 1e9, "busbw_GBps": algbw * FACTOR[coll](n) / 1e9})
                if world.rank == 0:
                    print(f"# {coll:15s} {algo:5s} {count * 4 / 2**20:8.1f} MiB {t * 1e3:10.1f} ms "
                          f"busbw {rows[-1]['busbw_GBps'] * 8:.3f} Gbit/s", file=sys.stderr, flush=True)
    if world.rank == 0:
        print("RESULT " + json.dumps({"rank": 0, "size": n, "rows": rows}), flush=True)
    world.barrier()


if __name__ == "__main__":
    main()
