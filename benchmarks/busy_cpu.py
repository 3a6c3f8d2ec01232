"""uccl vs Open MPI when the CPU is busy: all_reduce (or all_gather) beside N busy-loop processes.

    python benchmarks/busy_cpu.py --busy 0,1,2,3 --ranks 2 --sizes 8,4K,64K,256K,1M
    python benchmarks/busy_cpu.py --busy 0 --ranks 4          # oversubscribed: 4 ranks, 2 cores
    python benchmarks/busy_cpu.py --loops python --busy 2      # the Python APIs (compare.py)
    python benchmarks/busy_cpu.py --coll all_gather --busy 0 --sizes 64K,256K   # MPI_Allgather

Training processes share their cores with data loaders, Python threads and other ranks; a
library whose waiting (spinning, yielding, sleeping, a helper thread) fights the scheduler pays a
scheduler round trip per step. For every N in --busy this script starts N busy loops
(`sh -c 'while :; do :; done'`, each in its own process group; only those are stopped again),
then measures, per size and round, uccl and Open MPI back to back in an order that alternates
per round, so both see the same load:

  * c:      `mpirun -np R uccl-perf all_reduce -b S -e S -n I -w 10 -c 0 -z 1` (uccl's C++ loop of
            blocking calls) against benchmarks/mpi_c_latency.c (a C loop of MPI_Allreduce), both
            under the same mpirun, so both get mpirun's binding (a core per rank when R <= cores,
            none when oversubscribed); --launcher local starts uccl with `uccl-perf -N R` instead
            (no binding, as a plain `python` launch would be).
  * python: benchmarks/compare.py --libs uccl,mpi (uccl's and mpi4py's Python calls, alternated
            inside one job).

Prints per N the 1-minute load average at start and end and, per size, the median time of each
and uccl/mpi = t_mpi / t_uccl (the speed ratio, as in RESULTS.md: >= 0.67 is "within 1.5x").
The machine may be shared: say so with the figures.
"""
import argparse
import atexit
import json
import os
import re
import signal
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {s!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--busy", default="0,1,2,3", help="numbers of busy loops, comma separated (default 0,1,2,3)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--coll", choices=["all_reduce", "all_gather"], default="all_reduce",
                   help="all_gather sizes are the gathered bytes (nccl-tests' convention), as for uccl-perf")
    p.add_argument("--sizes", default="8,4K,64K,256K,1M", help="bytes, comma separated (K/M suffixes)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per size (median reported)")
    p.add_argument("--loops", default="c", help="c, python or c,python")
    p.add_argument("--launcher", choices=["mpirun", "local"], default="mpirun", help="how uccl's C loop is started")
    p.add_argument("--window", type=float, default=0.3,
                   help="seconds per measurement on a quiet machine (sets the operation count; keep it well "
                        "above a scheduler time slice)")
    p.add_argument("--iters-scale", type=float, default=1.0, help="scale the operations per measurement")
    p.add_argument("--uccl-env", action="append", default=[], help="NAME=VALUE for uccl's ranks (repeatable)")
    p.add_argument("--uccl-perf", default="uccl-perf",
                   help="the uccl-perf command (e.g. 'python -m uccl.perf' with --uccl-env PYTHONPATH=<other build>)")
    p.add_argument("--json", default=None, help="also write every sample here")
    a = p.parse_args(argv)
    a.busy = [int(x) for x in a.busy.split(",") if x.strip()]
    a.sizes = [parse_size(x) for x in a.sizes.split(",") if x.strip()]
    a.loops = [x.strip() for x in a.loops.split(",") if x.strip()]
    return a


def iterations(a, nbytes):
    """Enough operations for about --window seconds on a quiet machine (after busy loops, more).

    A measurement must span many scheduler time slices (3-6 ms each with two tasks on a core):
    one that lasts a few of them reports whether a preemption happened to fall inside it. The
    counts this script used until 2026-11-27 (3000 operations at <= 4 KiB: 2-12 ms) made the
    4 KiB figures beside one busy loop bimodal (single rounds of 2 us and of 10 us, either
    library), and their median ratio swung between 0.37 and 1.07 from run to run."""
    est_s = 1e-6 + nbytes / 1.0e9 * max(1, a.ranks - 1)  # a rough quiet-machine time per operation
    return max(20, int(a.window / est_s * a.iters_scale))


class BusyLoops:
    """N `sh -c 'while :; do :; done'` processes, each its own process group; stops only them."""

    def __init__(self):
        self.procs = []
        atexit.register(self.stop)

    def start(self, n):
        for _ in range(n):
            self.procs.append(subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True))

    def stop(self):
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        self.procs = []


def run(cmd, env=None, timeout=600):
    # Not from the checkout: `python -m uccl.perf` would import its uccl/ (no _core) instead.
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=tempfile.gettempdir())
    if r.returncode != 0:
        sys.stderr.write(f"# command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}\n")
        return None
    return r.stdout


def uccl_c(a, size, iters, tmp, env):
    out = os.path.join(tmp, "u.json")
    perf = a.uccl_perf.split() + [a.coll, "-b", str(size), "-e", str(size), "-n", str(iters), "-w", "10", "-c", "0",
            "-z", "1", "-J", out]
    cmd = MPIRUN + ["-np", str(a.ranks)] + [x for kv in a.uccl_env for x in ("-x", kv)] + perf \
        if a.launcher == "mpirun" else perf + ["-N", str(a.ranks)]
    if run(cmd, env=env) is None:
        return None
    return json.load(open(out))["results"][0]["out_of_place"]["time_us"]


def mpi_c(a, size, iters, exe):
    text = run(MPIRUN + ["-np", str(a.ranks), exe, str(iters), str(size), "1",
                         "allgather" if a.coll == "all_gather" else "allreduce"])
    m = re.search(r"^\s*%d bytes\s+([\d.]+) us" % size, text or "", re.M)
    return float(m.group(1)) if m else None


def c_loops(a, exe, env):
    rows = []
    with tempfile.TemporaryDirectory(prefix="uccl-busy-") as tmp:
        for size in a.sizes:
            iters = iterations(a, size)
            samples = {"uccl": [], "mpi": []}
            for rnd in range(a.rounds):
                order = ["uccl", "mpi"] if rnd % 2 == 0 else ["mpi", "uccl"]
                for lib in order:
                    t = uccl_c(a, size, iters, tmp, env) if lib == "uccl" else mpi_c(a, size, iters, exe)
                    if t is not None:
                        samples[lib].append(t)
            rows.append({"size": size, "iters": iters, "samples_us": samples})
            report(rows[-1])
    return rows


def python_loops(a, env):
    rows = []
    with tempfile.TemporaryDirectory(prefix="uccl-busy-") as tmp:
        out = os.path.join(tmp, "cmp")
        cmd = MPIRUN + ["-np", str(a.ranks)] + [x for kv in a.uccl_env for x in ("-x", kv)] + [
            sys.executable, os.path.join(HERE, "compare.py"), a.coll, "--libs", "uccl,mpi",
            "--sizes", ",".join(str(s) for s in a.sizes), "-R", str(max(a.rounds, 3)), "--out", out]
        if run(cmd, env=env, timeout=1800) is None:
            return rows
        for r in json.load(open(out + ".json"))["rows"]:
            rows.append({"size": r["size"], "iters": r["iters"],
                         "samples_us": {k: r["libs"][k]["samples_us"] for k in ("uccl", "mpi")}})
            report(rows[-1])
    return rows


def report(row):
    u, m = row["samples_us"]["uccl"], row["samples_us"]["mpi"]
    if not u or not m:
        print(f"  {row['size']:>9}  (failed)")
        return
    tu, tm = statistics.median(u), statistics.median(m)
    row["uccl_us"], row["mpi_us"], row["uccl/mpi"] = tu, tm, tm / tu
    flag = "" if tm / tu >= 1 / 1.5 else "  <- beyond 1.5x"
    print(f"  {row['size']:>9} {row['iters']:>6} {tu:>10.2f} {tm:>10.2f} {tm / tu:>9.2f}   "
          f"uccl {' '.join(f'{x:.2f}' for x in u)} | mpi {' '.join(f'{x:.2f}' for x in m)}{flag}", flush=True)


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    if not shutil.which("uccl-perf") or not shutil.which("mpicc"):
        raise SystemExit("needs uccl-perf (pip install .) and mpicc (Open MPI) on PATH")
    env = dict(os.environ)
    for kv in a.uccl_env:
        k, _, v = kv.partition("=")
        env[k] = v
    loops = BusyLoops()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = []
    with tempfile.TemporaryDirectory(prefix="uccl-busy-") as tmp:
        exe = os.path.join(tmp, "mpi_c_latency")
        subprocess.run(["mpicc", "-O2", "-o", exe, os.path.join(HERE, "mpi_c_latency.c")], check=True)
        print(f"# busy_cpu: {a.coll} float{' sum' if a.coll == 'all_reduce' else ''}, {a.ranks} ranks on {os.cpu_count()} cpus, rounds {a.rounds}, "
              f"uccl launcher {a.launcher}, uccl env {' '.join(a.uccl_env) or '-'}")
        for n in a.busy:
            for kind in a.loops:
                loops.start(n)
                time.sleep(0.5)
                load0 = os.getloadavg()[0]
                print(f"# {n} busy loops, {kind} loops, 1-min load {load0:.2f} at start "
                      f"({time.strftime('%H:%M:%S', time.gmtime())} UTC)")
                print(f"  {'size(B)':>9} {'iters':>6} {'uccl us':>10} {'mpi us':>10} {'uccl/mpi':>9}   rounds")
                rows = c_loops(a, exe, env) if kind == "c" else python_loops(a, env)
                loops.stop()
                load1 = os.getloadavg()[0]
                print(f"# load {load1:.2f} at end")
                results.append({"busy": n, "loop": kind, "ranks": a.ranks, "launcher": a.launcher,
                                "load_start": load0, "load_end": load1, "rows": rows})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "uccl_env": a.uccl_env, "results": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()
