"""A/B of one uccl-perf measurement under alternating environment settings, in one run.

    python benchmarks/ab_env.py UCCL_EXPRESS=0,UCCL_EXPRESS=1 [rounds=5] [uccl-perf arguments...]
    NP=4 python benchmarks/ab_env.py "UCCL_WAIT_YIELD=auto,UCCL_WAIT_YIELD=0" 5 all_reduce -b 8 -e 8 -n 3000 -w 100 -c 0 -z 1

Each setting is NAME=VALUE[;NAME=VALUE...]. Per round, every setting runs
`mpirun -np $NP -x NAME=VALUE uccl-perf ARGS` (default: the 8-byte all_reduce latency loop,
20,000 blocking calls), in an order that alternates per round so that both see the same load;
prints per setting the median out-of-place time (and in-place, when uccl-perf reports it) and
every round's out-of-place time. Needs uccl-perf and mpirun on PATH.
"""
import os
import statistics
import subprocess
import sys

DEFAULT = ["all_reduce", "-b", "8", "-e", "8", "-n", "20000", "-w", "1000", "-c", "0", "-z", "1"]


def ab_argv(argv, doc, default_rounds):
    """The A/B scripts' command line: VARIANTS [rounds] [uccl-perf arguments...]. Returns
    (variants, rounds, uccl-perf arguments), or an exit code after printing `doc` for -h / none."""
    if not argv or argv[0] in ("-h", "--help"):
        print(doc)
        return 0 if argv else 2
    return argv[0].split(","), int(argv[1]) if len(argv) > 1 else default_rounds, argv[2:] or DEFAULT


def main(argv):
    parsed = ab_argv(argv, __doc__, 5)
    if isinstance(parsed, int):
        return parsed
    sets, rounds, args = parsed
    nprocs = os.environ.get("NP", "2")
    res = {d: [] for d in sets}
    for r in range(rounds):
        for d in (sets if r % 2 == 0 else sets[::-1]):
            xs = [x for kv in d.split(";") for x in ("-x", kv)]
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", nprocs] + xs + ["uccl-perf"] + args
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            rows = [line.split() for line in out.splitlines() if line.strip() and not line.startswith("#")]
            # uccl-perf's row: size count type redop root time algbw busbw #wrong [in-place: time ...]
            res[d].append([float(v) for v in rows[-1][5::4][:2]])
    for d in sets:
        cols = list(zip(*res[d]))
        meds = "  ".join(f"{name} {statistics.median(c):.3f} us" for name, c in zip(("out-of-place", "in-place"), cols))
        print(f"{d:28s} {meds}   rounds {' '.join(f'{x[0]:.2f}' for x in res[d])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
