"""A/B of uccl-perf between two installs of uccl (say a venv of main and one of a branch), with
Open MPI's C loop beside them, in alternating rounds of one run.

    python benchmarks/ab_builds.py /work/venv-base/bin,/work/venv-lat/bin [rounds=6] [uccl-perf arguments...]

Per round, every install runs `mpirun -np $NP <bin>/uccl-perf ARGS` (default: the 8-byte
all_reduce latency loop, 20,000 blocking calls) and Open MPI runs benchmarks/mpi_c_latency.c
(built here with mpicc; MPI_SIZE bytes, default 8; MPI_C=0 leaves it out), in an order that
alternates per round so that all see the same load. Prints per entry the median out-of-place time,
its range and every round's time. ab_env.py does the same for settings of one install.
On a shared machine, IDLE=0.9 waits before every run until the CPUs were at least 90% idle
for half a second (at most 10 minutes; the wait is printed), so no run overlaps another job,
and LOCK=/tmp/uccl-measure.lock holds that file's lock (flock) during each run only.
"""
import fcntl
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ab_env import ab_argv  # noqa: E402  the same command line as ab_env.py
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", os.environ.get("NP", "2")]


def uccl_time(bindir, args):
    out = subprocess.run(MPIRUN + [os.path.join(bindir, "uccl-perf")] + args, capture_output=True, text=True,
                         check=True).stdout
    rows = [line.split() for line in out.splitlines() if line.strip() and not line.startswith("#")]
    return float(rows[-1][5])  # size count type redop root time ...


def mpi_time(exe, size):
    out = subprocess.run(MPIRUN + [exe, "20000", str(size), "3"], capture_output=True, text=True, check=True).stdout
    return float([line for line in out.splitlines() if "bytes" in line][-1].split()[2])


def cpu_idle(seconds):
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)  # idle + iowait, total
    i0, t0 = sample()
    time.sleep(seconds)
    i1, t1 = sample()
    return (i1 - i0) / max(1, t1 - t0)


def wait_idle(threshold, waited):
    start = time.time()
    while cpu_idle(0.5) < threshold and time.time() - start < 600:
        pass
    waited.append(time.time() - start)


def main(argv):
    parsed = ab_argv(argv, __doc__, 6)
    if isinstance(parsed, int):
        return parsed
    bins, rounds, args = parsed
    entries = [(b, lambda b=b: uccl_time(b, args)) for b in bins]
    tmp = tempfile.mkdtemp()
    if os.environ.get("MPI_C", "1") != "0":
        exe = os.path.join(tmp, "mpi_c_latency")
        subprocess.run(["mpicc", "-O2", "-o", exe, os.path.join(HERE, "mpi_c_latency.c")], check=True)
        size = int(os.environ.get("MPI_SIZE", "8"))
        entries.append((f"Open MPI C loop, {size} B", lambda: mpi_time(exe, size)))
    res = {name: [] for name, _ in entries}
    idle, waited = float(os.environ.get("IDLE", "0")), []
    for r in range(rounds):
        for name, fn in (entries if r % 2 == 0 else entries[::-1]):
            if idle > 0:
                wait_idle(idle, waited)
            with open(os.environ.get("LOCK", "/dev/null")) as lock:
                if "LOCK" in os.environ:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                res[name].append(fn())
    if waited:
        print(f"# waited for idle CPUs before each run: {sum(waited):.0f} s in all, at most {max(waited):.0f} s")
    for name, _ in entries:
        t = res[name]
        print(f"{name:40s} median {statistics.median(t):.3f} us  ({min(t):.3f}-{max(t):.3f})   rounds "
              + " ".join(f"{x:.3f}" for x in t))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
