"""Ray collective all_reduce: backend "uccl" against Ray's built-in "gloo" (torch's Gloo through
ray.util.collective), the same 4 actors, alternating per size and round.

    python benchmarks/ray_bench.py [--actors 4] [--min 1K] [--max 64M] [--rounds 3] [--json FILE]

Every actor joins both groups; for each size and round the uccl group and the gloo group each run
a timed loop of ray.util.collective.allreduce on a float32 torch tensor (the same tensor type for
both) between two barriers, and the slowest actor's time counts. busbw = 2 (n-1)/n * bytes / time
(nccl-tests' all_reduce factor); the table shows the median round of each backend and the ratio of
the medians, and the ratio of the best rounds (less sensitive to other jobs on a shared machine).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import ray

BUDGET_S = 0.25  # timed-loop length per backend, size and round


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


@ray.remote(num_cpus=0, max_restarts=0)
class Bench:
    def __init__(self, rank, world):
        import torch
        import uccl.ray  # noqa: F401
        from ray.util import collective as col
        self.torch, self.col = torch, col
        col.init_collective_group(world, rank, backend="uccl", group_name="uccl")
        col.init_collective_group(world, rank, backend="gloo", group_name="gloo")

    def ready(self):
        return True

    def run(self, group, nbytes, iters):
        col = self.col
        x = self.torch.ones(nbytes // 4, dtype=self.torch.float32)
        col.allreduce(x, group_name=group)  # warm-up (first use connects)
        col.barrier(group_name=group)
        start = time.perf_counter()
        for _ in range(iters):
            col.allreduce(x, group_name=group)
        col.barrier(group_name=group)
        return time.perf_counter() - start


def timed(actors, group, nbytes, iters):
    return max(ray.get([a.run.remote(group, nbytes, iters) for a in actors], timeout=600)) / iters


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--actors", type=int, default=4)
    ap.add_argument("--min", default="1K")
    ap.add_argument("--max", default="64M")
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    n = args.actors
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows = []
    try:
        actors = [Bench.remote(r, n) for r in range(n)]
        ray.get([a.ready.remote() for a in actors], timeout=300)
        size = parse_size(args.min)
        print(f"# Ray all_reduce, {n} actors on one host, float32; load average {os.getloadavg()[0]:.1f} at start")
        print(f"{'bytes':>10} {'uccl us':>10} {'gloo us':>10} {'uccl GB/s':>10} {'gloo GB/s':>10} {'ratio':>7} "
              f"{'best/best':>9}")
        while size <= parse_size(args.max):
            # iterations from one probe of the slower backend, so both loops take ~BUDGET_S
            probe = max(timed(actors, g, size, 1) for g in ("uccl", "gloo"))
            iters = int(min(1000, max(3, BUDGET_S / probe)))
            times = {"uccl": [], "gloo": []}
            for r in range(args.rounds):
                for g in (("uccl", "gloo") if r % 2 == 0 else ("gloo", "uccl")):
                    times[g].append(timed(actors, g, size, iters))
            med = {g: float(np.median(t)) for g, t in times.items()}
            best = min(times["gloo"]) / min(times["uccl"])
            bus = {g: 2 * (n - 1) / n * size / t / 1e9 for g, t in med.items()}
            rows.append({"bytes": size, "iters": iters, "uccl_s": med["uccl"], "gloo_s": med["gloo"],
                         "uccl_busbw_GBps": bus["uccl"], "gloo_busbw_GBps": bus["gloo"],
                         "ratio": med["gloo"] / med["uccl"], "best_ratio": best, "rounds": times})
            print(f"{size:>10} {med['uccl'] * 1e6:>10.1f} {med['gloo'] * 1e6:>10.1f} {bus['uccl']:>10.3f} "
                  f"{bus['gloo']:>10.3f} {med['gloo'] / med['uccl']:>6.2f}x {best:>8.2f}x", flush=True)
            size *= args.factor
    finally:
        ray.shutdown()
    print(f"# load average {os.getloadavg()[0]:.1f} at the end")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"actors": n, "rows": rows, "loadavg_end": os.getloadavg()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
