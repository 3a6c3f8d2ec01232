"""nccl-tests' text layout (same columns and number formats) and the JSON record."""
import json
import os
import socket
import time


def header(args, nranks, rank_lines, out):
    extra = ("  %9s  %9s" % ("predicted", "meas/pred"), "  %9s  %9s" % ("(us)", "")) if args.predict else ("", "")
    factor = f"{args.stepfactor}(factor)" if args.stepfactor > 1 else f"{args.stepbytes}(bytes)"
    out(f"# uccl-perf {args.coll.name}: nranks {nranks} minBytes {args.minbytes} maxBytes {args.maxbytes} "
        f"step: {factor} warmup iters: {args.warmup_iters} iters: {args.iters} validation: {args.check} "
        f"blocking: {args.blocking} average: {args.average}")
    out("#")
    out("# Using ranks")
    for line in rank_lines:
        out("#  " + line)
    out("#")
    out("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
        % ("", "", "", "", ""))
    out("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s"
        % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
           "#wrong") + extra[0])
    out("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s"
        % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "") + extra[1])


def params(nbytes, count, tname, opname, root):
    return "%12li  %12li  %8s  %6s  %6i" % (nbytes, count, tname, opname, root)


def time_str(us):
    if us >= 10000.0:
        return "%7.0f" % us
    if us >= 100.0:
        return "%7.1f" % us
    return "%7.2f" % us


def result(us, algbw, busbw, wrong):
    w = "%5li" % wrong if wrong is not None else "%5s" % "N/A"
    return "  %7s  %6.2f  %6.2f  %s" % (time_str(us), algbw, busbw, w)


def predicted(pred_us, meas_us):
    return "  %9s  %9.2f" % (time_str(pred_us).strip(), meas_us / pred_us if pred_us > 0 else float("nan"))


def footer(errors, avg_busbw, out):
    out("# Out of bounds values : %d %s" % (errors, "FAILED" if errors else "OK"))
    out("# Avg bus bandwidth    : %g " % avg_busbw)
    out("#")


def rank_line(comm):
    """' Rank  0 Pid  1234 on host: peer 1 shm, ...' from this rank's describe()."""
    peers = []
    for line in comm.describe().splitlines():
        line = line.strip()
        if not line.startswith("peer "):
            continue
        who, _, what = line.partition(": ")
        kind = what.split()[0] if what else "?"
        if what.startswith("not connected"):
            kind = what.split("would use ")[1].rstrip(")") if "would use" in what else "pending"
        peers.append(f"{who.split()[1]} {kind}")
    return "Rank %2d Pid %6d on %s: peers %s" % (comm.rank, os.getpid(), socket.gethostname(),
                                                 ", ".join(peers) if peers else "none")


def write_json(path, args, nranks, rows, errors, avg_busbw, rank_lines):
    doc = {
        "tool": "uccl-perf",
        "collective": args.coll.name,
        "nranks": nranks,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
        "config": {"minbytes": args.minbytes, "maxbytes": args.maxbytes, "stepbytes": args.stepbytes,
                   "stepfactor": args.stepfactor, "iters": args.iters, "warmup_iters": args.warmup_iters,
                   "check": args.check, "blocking": args.blocking, "average": args.average,
                   "transport": args.transport, "algorithm": args.algorithm, "predict": args.predict},
        "ranks": rank_lines,
        "results": rows,
        "out_of_bounds": errors,
        "avg_busbw": avg_busbw,
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
