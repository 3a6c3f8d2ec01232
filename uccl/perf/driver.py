"""The sweep of uccl-perf on one rank: sizes x (out-of-place, in-place), like nccl-tests' TimeTest.

Per size and mode: inputs are written (when checking), the C++ loop runs -w warmup and -n timed
iterations after a barrier, the per-iteration time is combined across ranks (-a), and with -c
the collective runs once more on fresh inputs and every rank counts its wrong elements (summed
over ranks). Only rank 0 prints. Returns the number of (size, mode) cases that had wrong values.
"""
import sys

import numpy as np

from . import bench, data, report


def combine(comm, value, mode):
    """nccl-tests' -a: 0 rank 0's value, 1 average, 2 min, 3 max over ranks."""
    x = np.array([value], dtype=np.float64)
    if mode == 0:
        comm.broadcast(x, root=0)
        return float(x[0])
    comm.all_reduce(x, op={1: "sum", 2: "min", 3: "max"}[mode])
    return float(x[0]) / (comm.size if mode == 1 else 1)


def sum_over_ranks(comm, value):
    x = np.array([value], dtype=np.int64)
    comm.all_reduce(x)
    return int(x[0])


def gather_lines(comm, line, width=256):
    raw = np.zeros(width, dtype=np.uint8)
    enc = line.encode()[:width]
    raw[:len(enc)] = np.frombuffer(enc, dtype=np.uint8)
    allr = comm.all_gather(raw)
    return [bytes(allr[i * width:(i + 1) * width]).rstrip(b"\0").decode(errors="replace") for i in range(comm.size)]


def roots(args, n):
    if not args.coll.rooted:
        return [-1]
    return list(range(n)) if args.root == -1 else [args.root]


def run(comm, args, out=print):
    n, rank = comm.size, comm.rank
    main = rank == 0
    say = out if main else (lambda *_: None)
    timeout = args.timeout if args.timeout > 0 else -1.0
    for r in roots(args, n):
        if r >= n:
            raise SystemExit(f"uccl-perf: root {r} out of range for {n} ranks")
    comm.barrier()
    lines = gather_lines(comm, report.rank_line(comm))
    report.header(args, n, lines, say)
    bufs = bench.Buffers(args.maxbytes)
    errors, bw_sum, bw_count, rows = 0, 0.0, 0, []
    for tname in args.types:
        esize = data.storage(tname).itemsize
        for op in args.ops:
            for root in roots(args, n):
                for size in args.sizes:
                    count = args.coll.count(size, esize, n)
                    nbytes = max(args.coll.send_count(count, n), args.coll.recv_count(count, n)) * esize
                    line = report.params(nbytes, count, tname, op, root)
                    row = {"size": nbytes, "count": count, "type": tname, "redop": op, "root": root}
                    if args.predict:
                        row["predicted_us"] = args.coll.predicted_s(comm, count, esize) * 1e6
                    for in_place in (False, True):
                        m = bench.Measure(comm, bufs, args.coll, tname, op, max(root, 0), in_place, count, timeout)
                        if args.check:
                            m.prepare()
                        sec = m.run(args.warmup_iters, args.iters, bool(args.blocking)) / args.iters
                        sec = combine(comm, sec, args.average)
                        algbw, busbw = args.coll.bandwidth(count, esize, n, sec)
                        wrong = None
                        if args.check:
                            wrong = 0
                            for _ in range(args.check):
                                wrong = sum_over_ranks(comm, m.check(bool(args.blocking)))
                                if wrong:
                                    break
                            errors += 1 if wrong else 0
                        line += report.result(sec * 1e6, algbw, busbw, wrong)
                        row["in_place" if in_place else "out_of_place"] = {
                            "time_us": sec * 1e6, "algbw": algbw, "busbw": busbw, "wrong": wrong}
                        bw_sum += busbw
                        bw_count += 1
                    if args.predict:
                        line += report.predicted(row["predicted_us"], row["out_of_place"]["time_us"])
                    say(line)
                    if main:
                        sys.stdout.flush()
                    rows.append(row)
    avg = bw_sum / bw_count if bw_count else 0.0
    report.footer(errors, avg, say)
    if main and args.json:
        report.write_json(args.json, args, n, rows, errors, avg, lines)
    return errors
