"""How close uccl's predictions come to what the same communicator then measures.

    python benchmarks/estimate_bench.py [--worlds 2,4] [--transports shm,tcp] [--hosts 1]
        [--colls all_reduce,all_gather,reduce_scatter,broadcast,all_to_all] [--sizes 64K,1M,16M,64M]
        [--iters 10] [--json FILE]

For every world size and transport, one communicator per rank (processes on this host; with
--hosts H > 1 the ranks say they are on H hosts, UCCL_HOST_ID, so pairs between "hosts" take tcp
and the topology has a network level). Each row: the prediction (comm.estimate: the algorithm
uccl would pick and its cost on the communicator's topology, what torch's dist._time_estimator
adds up) made before any collective ran, the median of --iters blocking runs (a barrier before
each), measured / predicted, and the prediction made again after all the runs (a collective that
reads the topology runs the link probe first: the network level's measured rate replaces the
default one). Sizes are the cost model's D: the reduced vector (all_reduce, reduce_scatter's
input), the gathered output (all_gather), the broadcast buffer, one rank's send buffer of
all_to_all. The figures and what they say go to benchmarks/RESULTS.md ("Predicted against
measured").
"""
import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
import time


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, world, port, transport, args, q):
    if args.hosts > 1:
        os.environ["UCCL_HOST_ID"] = f"host{rank * args.hosts // world}"
    import numpy as np
    import uccl

    store = uccl.TcpStore("127.0.0.1", port, is_server=rank == 0)
    comm = uccl.Communicator(rank, world, store, transport=transport, timeout=120)
    rows = []
    from uccl.perf.args import parse_size  # nccl-tests' size syntax (64K, 1M)

    grid = [(c, parse_size(s) // 4 // world * world * 4) for c in args.colls.split(",") for s in args.sizes.split(",")]
    before = {(c, d): comm.estimate(c, d) for c, d in grid}
    for coll, d in grid:
        n = d // 4
        x = np.ones(n, np.float32)
        if coll == "all_reduce":
            run = lambda: comm.all_reduce(x)  # noqa: E731
        elif coll == "all_gather":
            mine, out = np.ones(n // world, np.float32), np.empty(n, np.float32)
            run = lambda: comm.all_gather(mine, out=out)  # noqa: E731
        elif coll == "reduce_scatter":
            out = np.empty(n // world, np.float32)
            run = lambda: comm.reduce_scatter(x, out=out)  # noqa: E731
        elif coll == "broadcast":
            run = lambda: comm.broadcast(x, root=0)  # noqa: E731
        elif coll == "all_to_all":
            out = np.empty(n, np.float32)
            run = lambda: comm.all_to_all(x, out=out)  # noqa: E731
        else:
            raise SystemExit(f"unknown collective {coll}")
        times = []
        for i in range(args.iters + 2):
            comm.barrier()
            t0 = time.perf_counter()
            run()
            if i >= 2:
                times.append(time.perf_counter() - t0)
        # Every rank's median; the slowest rank's is the collective's.
        med = np.array([statistics.median(times)], np.float64)
        comm.all_reduce(med, op="max")
        rows.append({"world": world, "hosts": args.hosts, "transport": transport, "collective": coll,
                     "bytes": d, "predicted_s": before[(coll, d)], "measured_s": float(med[0])})
    for r in rows:
        r["predicted_after_s"] = comm.estimate(r["collective"], r["bytes"])
    if rank == 0:
        q.put(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--transports", default="shm,tcp")
    ap.add_argument("--hosts", type=int, default=1)
    ap.add_argument("--colls", default="all_reduce,all_gather,reduce_scatter,broadcast,all_to_all")
    ap.add_argument("--sizes", default="64K,1M,16M,64M")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    every = []
    print(f"load {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    print(f"{'world':>5} {'hosts':>5} {'transport':>9} {'collective':>15} {'bytes':>10} {'measured ms':>12} "
          f"{'predicted ms':>13} {'meas/pred':>9} {'pred. after':>11} {'meas/after':>10}")
    for world in [int(w) for w in args.worlds.split(",")]:
        for transport in args.transports.split(","):
            q = ctx.Queue()
            port = _free_port()
            procs = [ctx.Process(target=_rank, args=(r, world, port, transport, args, q)) for r in range(world)]
            for p in procs:
                p.start()
            rows = q.get(timeout=1800)
            for p in procs:
                p.join()
            for r in rows:
                print(f"{r['world']:>5} {r['hosts']:>5} {r['transport']:>9} {r['collective']:>15} {r['bytes']:>10} "
                      f"{r['measured_s'] * 1e3:>12.3f} {r['predicted_s'] * 1e3:>13.3f} "
                      f"{r['measured_s'] / r['predicted_s']:>9.2f} {r['predicted_after_s'] * 1e3:>11.3f} "
                      f"{r['measured_s'] / r['predicted_after_s']:>10.2f}", flush=True)
            every += rows
    if args.json:
        with open(args.json, "w") as f:
            json.dump(every, f, indent=1)


if __name__ == "__main__":
    main()
