"""uccl vs PyTorch Gloo vs Open MPI: the same sweep, alternating the libraries.

    mpirun --allow-run-as-root --oversubscribe -np 2 python benchmarks/compare.py all_reduce \\
        -b 8 -e 256M -f 4 -n 20 -R 5 --out benchmarks/results/allreduce_2r

Runs under mpirun (MPI is one of the contenders and carries the bookkeeping). For every size,
R rounds are run; each round times every library once, in an order rotated per round, so slow
phases of a shared machine hit all of them alike. The reported time per library is the median
(or, with --stat best, the minimum) of its rounds, each round being the rank-average of -n
back-to-back operations. Prints one table (busbw of each library and uccl's ratio to each) and
writes <out>.json and <out>.png (busbw vs size, one line per library).
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # Gloo runs need no uccl backend registered by torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_libs as libs  # noqa: E402
from mpi4py import MPI  # noqa: E402

import uccl  # noqa: E402
from uccl.perf import args as perf_args  # noqa: E402
from uccl.perf import colls, data  # noqa: E402


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("collective", help=", ".join(colls.COLLS))
    p.add_argument("-b", "--minbytes", type=perf_args.parse_size, default=8)
    p.add_argument("-e", "--maxbytes", type=perf_args.parse_size, default=256 << 20)
    p.add_argument("-f", "--stepfactor", type=int, default=4)
    p.add_argument("--sizes", default=None, help="explicit comma separated sizes (e.g. 8,64K,1M); overrides -b/-e/-f")
    p.add_argument("-n", "--iters", type=int, default=20,
                   help="timed operations per round, at least (mid sizes get enough to move 64 MiB per round)")
    p.add_argument("--small-iters", type=int, default=200, help="timed operations per round up to 64 KiB")
    p.add_argument("-w", "--warmup_iters", type=int, default=3, help="untimed operations before each round")
    p.add_argument("-R", "--rounds", type=int, default=5, help="alternating rounds per size")
    p.add_argument("-d", "--datatype", default="float")
    p.add_argument("-o", "--op", default="sum")
    p.add_argument("-z", "--blocking", type=int, default=1,
                   help="uccl waits for each operation before the next (default 1, like the others' calls)")
    p.add_argument("--uccl-loop", choices=["python", "cpp"], default="python",
                   help="time uccl through its Python API like the others (default), or uccl-perf's C++ loop")
    p.add_argument("--stat", choices=["median", "best"], default="median")
    p.add_argument("--libs", default="uccl,gloo,mpi", help="comma separated subset")
    p.add_argument("--transport", default=None, help="force uccl's transport (shm, tcp)")
    p.add_argument("--out", default=None, help="write <out>.json and <out>.png")
    a = p.parse_args(argv)
    a.coll = colls.get(a.collective)
    a.tname = data.type_name(a.datatype)
    a.sizes = ([perf_args.parse_size(x) for x in a.sizes.split(",")] if a.sizes
               else perf_args.sizes(a.minbytes, a.maxbytes, 0, a.stepfactor))
    a.libs = [x.strip() for x in a.libs.split(",") if x.strip()]
    return a


def iterations(a, nbytes):
    """Operations per round: --small-iters up to 64 KiB; above, enough to move 64 MiB per
    round (at most --small-iters, at least -n). With only -n = 10 operations of 256 KiB a round
    lasts ~0.3 ms, and what it measures is the first operations after another library ran
    (cold caches): uccl's all_reduce 256 KiB read 46 us that way against 31 us steady."""
    if nbytes <= (64 << 10):
        return a.small_iters
    return max(a.iters, min(a.small_iters, (64 << 20) // nbytes))


def make_runners(a, mpi):
    rank, size = mpi.rank, mpi.size
    runners = []
    for name in a.libs:
        if name == "uccl":
            opts = {"transport": a.transport} if a.transport else {}
            runners.append(libs.UcclRunner(uccl.init(**opts), blocking=bool(a.blocking), loop=a.uccl_loop))
        elif name == "mpi":
            runners.append(libs.MpiRunner(mpi))
        elif name == "gloo":
            addr = None
            if rank == 0:
                with socket.socket() as s:
                    s.bind(("", 0))
                    addr = (os.environ.get("COMPARE_MASTER_ADDR", "127.0.0.1"), s.getsockname()[1])
            addr = mpi.bcast(addr, root=0)
            runners.append(libs.GlooRunner(rank, size, *addr))
        else:
            raise SystemExit(f"unknown library {name!r}")
    return runners


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    mpi = MPI.COMM_WORLD
    n, main_rank = mpi.size, mpi.rank == 0
    runners = make_runners(a, mpi)
    names = [r.name for r in runners]
    esize = data.storage(a.tname).itemsize
    out = print if main_rank else (lambda *_: None)
    load_start = os.getloadavg()
    out(f"# compare {a.coll.name}: {n} ranks, {a.tname}, {a.op if a.coll.reduces else 'none'}, rounds {a.rounds}, "
        f"iters >= {a.iters} (<=64K: {a.small_iters}; 64 MiB per round above), warmup {a.warmup_iters}, uccl loop {a.uccl_loop} (blocking {a.blocking}), "
        f"stat {a.stat}, host {socket.gethostname()}, load {load_start[0]:.2f}")
    cols = "".join(f" {nm + ' us':>10} {nm + ' busbw':>11}" for nm in names)
    ratios = [o for o in names if o != "uccl"] if "uccl" in names else []
    out(f"# {'size(B)':>11} {'count':>11}{cols}" + "".join(f" {'uccl/' + o:>10}" for o in ratios))
    rows = []
    for size in a.sizes:
        count = a.coll.count(size, esize, n)
        nbytes = max(a.coll.send_count(count, n), a.coll.recv_count(count, n)) * esize
        send, recv = libs.shared_buffers(nbytes, a.tname)
        for r in runners:
            r.setup(a.coll, count, a.tname, a.op, send, recv)
        iters = iterations(a, nbytes)
        samples = {nm: [] for nm in names}
        for rnd in range(a.rounds):
            order = runners[rnd % len(runners):] + runners[:rnd % len(runners)]
            for r in order:
                samples[r.name].append(libs.combine(mpi, r.time(a.warmup_iters, iters)))
        pick = min if a.stat == "best" else statistics.median
        row = {"size": nbytes, "count": count, "iters": iters, "libs": {}}
        line = f"  {nbytes:>11} {count:>11}"
        for nm in names:
            sec = pick(samples[nm])
            alg, bus = a.coll.bandwidth(count, esize, n, sec)
            row["libs"][nm] = {"time_us": sec * 1e6, "algbw": alg, "busbw": bus,
                               "samples_us": [s * 1e6 for s in samples[nm]]}
            line += f" {sec * 1e6:>10.2f} {bus:>11.4f}"
        for o in ratios:
            tu, to = row["libs"]["uccl"]["time_us"], row["libs"][o]["time_us"]
            row[f"uccl/{o}"] = to / tu if tu > 0 else 0.0  # busbw ratio = inverse time ratio
            line += f" {row[f'uccl/{o}']:>10.2f}"
        out(line)
        sys.stdout.flush()
        rows.append(row)
        del send, recv
    if main_rank and a.out:
        doc = {"collective": a.coll.name, "nranks": n, "dtype": a.tname, "op": a.op, "libs": names,
               "rounds": a.rounds, "iters": a.iters, "small_iters": a.small_iters, "warmup": a.warmup_iters,
               "uccl_blocking": a.blocking, "uccl_loop": a.uccl_loop, "stat": a.stat, "host": socket.gethostname(),
               "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "load_start": load_start, "loadavg": os.getloadavg(),
               "command": " ".join(sys.argv), "rows": rows}
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out + ".json", "w") as f:
            json.dump(doc, f, indent=1)
        import plot
        plot.plot(doc, a.out + ".png")
        out(f"# wrote {a.out}.json and {a.out}.png")
    for r in runners:
        if hasattr(r, "close"):
            r.close()


if __name__ == "__main__":
    main()
