"""Staged all_reduce of simulated-device buffers against host all_reduce, measured in the same run.

    python benchmarks/staged_bench.py [--world 2] [--transport tcp|shm|auto] [--sizes 1M,4M,16M,64M]
        [--iters 20] [--copy-gbps 0] [--copy-latency-us 0] [--windows 1] [--bind none|core]
        [--staged on|auto|off]

Each size: the host all_reduce (numpy arrays) and the staged one (uccl.sim.SimArray: the
simulated device, unthrottled unless --copy-gbps / --copy-latency-us give it a GPU-like bus, a
bandwidth and a fixed cost per copy, which is what makes the chunk size matter; unthrottled, the
cost measured is the staging itself: bounce-buffer copies, chunking, events), interleaved in one
process per rank, the median over --iters of each. Prints time, algorithm bandwidth and the ratio
staged / host (goal: <= 1.25 from 1 MiB up, issue 14), the CPU time a rank's process spent per
call in each mode (all its threads: the caller's waits, the progress thread, the simulated
device's stream workers; the mean over the ranks of each rank's mean), then rank 0's staged pairs as describe()
gives them, with where the device chunks' time went (the mean of each stage over the run).
UCCL_STAGED=on by default, so every pair is split into staging chunks; --staged auto leaves the
choice to uccl as a program gets it (the communicator is made before any device memory; the pairs
connect at the first barrier, after the first size's arrays were made, so both ranks have device
memory then and offer staging in the handshake), --staged off gives whole messages (one bounce
buffer each). --bind core binds each rank's process
to one CPU (rank r to the r-th CPU it may use, as `mpirun --bind-to core` does) before uccl starts,
so its threads (the caller, the progress thread, the simulated device's stream workers) share that
core; both modes run bound.
"""
import argparse
import multiprocessing as mp
import os
import queue
import socket
import statistics
import sys
import time


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _parse_size(t):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(t[:-1]) * mult[t[-1].upper()] if t[-1].upper() in mult else int(t)


def _rank(rank, world, port, args, q):
    os.environ["UCCL_STAGED"] = args.staged
    if args.bind == "core":  # before any uccl thread exists: they inherit the mask
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    import numpy as np
    import uccl
    from uccl.sim import SimArray
    store = uccl.TcpStore("127.0.0.1", port, is_server=rank == 0)
    comm = uccl.Communicator(rank, world, store, transport=None if args.transport == "auto" else args.transport)
    uccl.sim.set_copy_speed(args.copy_gbps, args.copy_latency_us)
    rows = []
    for size in [_parse_size(s) for s in args.sizes.split(",")]:
        n = size // 4
        h = np.ones(n, np.float32)
        d = SimArray.from_numpy(h)
        th, td, ch, cd, windows = [], [], [], [], []
        for w in range(args.windows):
            wh, wd = len(th), len(td)
            for i in range(args.iters + (2 if w == 0 else 0)):
                for buf, out, cpu in ((h, th, ch), (d, td, cd)):
                    comm.barrier()
                    c0, t0 = time.process_time(), time.perf_counter()
                    comm.all_reduce(buf)
                    if w > 0 or i >= 2:
                        out.append(time.perf_counter() - t0)
                        cpu.append(time.process_time() - c0)
            windows.append((statistics.median(th[wh:]), statistics.median(td[wd:])))
        rows.append((size, statistics.median(th), statistics.median(td), statistics.mean(ch), statistics.mean(cd),
                     windows))
    peers = [ln.strip() for ln in comm.describe().splitlines() if ln.strip().startswith("peer ")]
    q.put((rank, (rows, peers)))
    comm.barrier()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--transport", default="tcp")
    p.add_argument("--sizes", default="1M,4M,16M,64M")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--copy-gbps", type=float, default=0.0)
    p.add_argument("--copy-latency-us", type=float, default=0.0)
    p.add_argument("--windows", type=int, default=1,
                   help="measure each size this many times in a row (--iters calls of each mode each), and "
                        "print the spread of the windows' ratios: on a VM the ratio moves with the machine's state "
                        "for seconds at a time (benchmarks/RESULTS.md)")
    p.add_argument("--bind", choices=["none", "core"], default="none",
                   help="core: each rank's process bound to one CPU (rank %% CPUs), as mpirun --bind-to core")
    p.add_argument("--staged", choices=["on", "auto", "off"], default="on",
                   help="UCCL_STAGED for every rank (auto: what a program that makes its communicator first gets)")
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, args.world, port, args, q)) for r in range(args.world)]
    for pr in procs:
        pr.start()
    res = {}
    deadline = time.monotonic() + 600
    while len(res) < len(procs):
        try:
            r, row = q.get(timeout=1)
            res[r] = row
        except queue.Empty:
            # A rank that died (a bad setting raised, a crash) sends nothing: say which, at once.
            dead = [(i, pr.exitcode) for i, pr in enumerate(procs) if pr.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                for pr in procs:
                    pr.kill()
                sys.exit(f"staged_bench: rank(s) {dead} exited (rank, exit code) before reporting"
                         if dead else "staged_bench: no result within 600 s")
    for pr in procs:
        pr.join(30)
    print(f"staged all_reduce (sim device, copy {args.copy_gbps or 'unthrottled'} GB/s, "
          f"{args.copy_latency_us} us per copy) vs host, world {args.world}, "
          f"{args.transport}, UCCL_STAGED={args.staged}, ranks bound: {args.bind}, median of {args.iters * args.windows}; load: {os.getloadavg()[0]:.2f}")
    print(f"{'bytes':>10} {'host ms':>9} {'staged ms':>10} {'host GB/s':>10} {'staged GB/s':>12} {'ratio':>6}"
          f" {'host cpu ms':>12} {'staged cpu ms':>14}")
    for i, (size, *_) in enumerate(res[0][0]):
        th = max(r[0][i][1] for r in res.values())
        td = max(r[0][i][2] for r in res.values())
        ch = statistics.mean(r[0][i][3] for r in res.values())
        cd = statistics.mean(r[0][i][4] for r in res.values())
        print(f"{size:>10} {th*1e3:>9.3f} {td*1e3:>10.3f} {size/th/1e9:>10.2f} {size/td/1e9:>12.2f} {td/th:>6.2f}"
              f" {ch*1e3:>12.2f} {cd*1e3:>14.2f}")
        if args.windows > 1:  # each window's ratio: the slowest rank's staged median over its host median
            ratios = sorted(max(r[0][i][5][w][1] for r in res.values()) / max(r[0][i][5][w][0] for r in res.values())
                            for w in range(args.windows))
            good = sum(x <= 1.25 for x in ratios)
            print(f"{'':>10} windows of {args.iters}: ratio min {ratios[0]:.2f}, p25 {ratios[len(ratios) // 4]:.2f}, "
                  f"median {statistics.median(ratios):.2f}, max {ratios[-1]:.2f}; {good} of {len(ratios)} within 1.25")
    print("rank 0:\n  " + "\n  ".join(res[0][1]))


if __name__ == "__main__":
    main()
