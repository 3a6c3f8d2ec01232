"""Command line of uccl-perf: nccl-tests' flags with nccl-tests' meaning and defaults."""
import argparse

from . import colls, data


def parse_size(text):
    """nccl-tests' parsesize: a number with an optional K/M/G (binary) suffix."""
    t = str(text).strip()
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    mult = units.get(t[-1:].lower(), 1)
    num = t[:-1] if t[-1:].lower() in units else t
    try:
        v = float(num) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (e.g. 8, 64K, 256M, 1G)")
    if v < 0:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}")
    return int(v)


def sizes(minbytes, maxbytes, stepbytes, stepfactor):
    """nccl-tests' sweep: multiply by -f when it is > 1, else add -i."""
    out, s = [], minbytes
    while s <= maxbytes:
        out.append(s)
        if stepfactor > 1:
            s = s * stepfactor if s > 0 else 1
        elif stepbytes > 0:
            s += stepbytes
        else:
            break
    return out


def parser():
    p = argparse.ArgumentParser(
        prog="uccl-perf",
        description="nccl-tests style benchmark of uccl collectives. Run under torchrun, mpirun or srun "
                    "(uccl.init() reads their environment), or with -N to start local ranks.",
        epilog="Collectives: " + ", ".join(colls.COLLS) + ". Example: uccl-perf all_reduce -N 2 -b 8 -e 256M -f 2")
    a = p.add_argument
    a("collective", help="one of: " + ", ".join(colls.COLLS))
    a("-b", "--minbytes", type=parse_size, default=32 << 20, help="minimum size in bytes (default 32M)")
    a("-e", "--maxbytes", type=parse_size, default=32 << 20, help="maximum size in bytes (default 32M)")
    a("-i", "--stepbytes", type=parse_size, default=1 << 20, help="size increment when -f is 1 (default 1M)")
    a("-f", "--stepfactor", type=int, default=1, help="size multiplication factor (default 1: use -i)")
    a("-n", "--iters", type=int, default=20, help="timed iterations per size (default 20)")
    a("-w", "--warmup_iters", type=int, default=5, help="untimed iterations before each timed run (default 5)")
    a("-c", "--check", type=int, default=1, help="check results: 0 off, N runs N checks per size (default 1)")
    a("-o", "--op", default="sum", help="reduction: " + ", ".join(data.OPS) + " or all (default sum)")
    a("-d", "--datatype", default="float", help="type: " + ", ".join(data.TYPES) + " or all (default float)")
    a("-r", "--root", type=int, default=0, help="root of rooted collectives; -1 runs every root (default 0)")
    a("-a", "--average", type=int, default=1, choices=[0, 1, 2, 3],
      help="time reported across ranks: 0 rank 0, 1 average, 2 min, 3 max (default 1)")
    a("-z", "--blocking", type=int, default=0, help="1: wait for each operation before issuing the next")
    a("-T", "--timeout", type=float, default=0, help="seconds before an operation is declared hung (0: uccl default)")
    a("-J", "--output_file", "--json", dest="json", default=None, help="also write the results to this JSON file")
    a("-N", "--nranks", type=int, default=0, help="start this many local ranks (for a quick look without a launcher)")
    a("-P", "--predict", type=int, default=0,
      help="1: two more columns, uccl's predicted time (comm.estimate: the algorithm it would pick, on "
           "its topology and link rates) and out-of-place time / predicted")
    a("--transport", default=None, help="force uccl's transport (tcp, shm): UCCL_TRANSPORT for this run")
    a("--algorithm", default=None, help="force uccl's algorithm (ring, direct): UCCL_ALGO for this run")
    return p


def parse(argv=None):
    p = parser()
    args = p.parse_args(argv)
    try:
        args.coll = colls.get(args.collective)
        args.types = list(data.TYPES) if args.datatype == "all" else [data.type_name(args.datatype)]
        if args.coll.reduces:
            args.ops = list(data.OPS) if args.op == "all" else [data.op_name(args.op)]
        else:
            args.ops = ["none"]
    except ValueError as e:
        p.error(str(e))
    if args.minbytes > args.maxbytes:
        p.error(f"minbytes ({args.minbytes}) is larger than maxbytes ({args.maxbytes})")
    if args.iters < 1 or args.warmup_iters < 0:
        p.error("-n must be >= 1 and -w >= 0")
    args.sizes = sizes(args.minbytes, args.maxbytes, args.stepbytes, args.stepfactor)
    return args
