"""Random soak of the device paths: seeds in a row, each a whole job (tests/device_soak.py).

    python benchmarks/device_soak.py --seeds 20            # seeds 0..19, 1-3 s each here
    python benchmarks/device_soak.py --seed 7 --ops 80     # replay one seed (a failure names it)
    python benchmarks/device_soak.py --minutes 30 --first 1000
    python benchmarks/device_soak.py --threads --seeds 20  # 2-4 threads per rank (tests/thread_soak.py)

Each seed draws the job as well as its operations: the world (2-4), the transport (shm, tcp, or
two emulated hosts), the staged path's settings (split or whole mode, shared slots or plain
chunks, chunk and bounce sizes down to 4 KiB / 64 KiB, so one message is many chunks and the
bounce buffers run out), uccl's copies by engine or kernel, a forced algorithm, and which rank is
a slower second "vendor". Prints one line per seed; exits non-zero after the first failure, with
the harness's report (failed checks with seed and operation, or where a rank hung).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from device_soak import job, run_seed  # noqa: E402
from thread_soak import run_seed_threads, threads_for  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, help="run this seed alone")
    ap.add_argument("--seeds", type=int, default=10, help="how many seeds (from --first)")
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--minutes", type=float, default=0, help="run seeds until this much time has passed")
    ap.add_argument("--ops", type=int, default=60, help="operations per seed")
    ap.add_argument("--timeout", type=float, default=240, help="seconds one seed may take")
    ap.add_argument("--threads", action="store_true",
                    help="each rank runs 2-4 threads, each with a communicator and a plan of its own")
    a = ap.parse_args()
    import _pytest.outcomes
    seeds = [a.seed] if a.seed is not None else range(a.first, a.first + (10 ** 9 if a.minutes else a.seeds))
    t_end = time.monotonic() + a.minutes * 60
    done = 0
    for seed in seeds:
        if a.minutes and time.monotonic() > t_end:
            break
        t0 = time.monotonic()
        world, transport, hosts, env, slow = job(seed)
        label = (f"seed {seed}: world {world}{f', {threads_for(seed)} threads' if a.threads else ''}, "
                 f"{transport}{' (2 hosts)' if hosts else ''}, "
                 + " ".join(f"{k[5:]}={v}" for k, v in env.items()) + (f", slow ranks {list(slow)}" if slow else ""))
        try:
            _, _, _, _, _, res = (run_seed_threads if a.threads else run_seed)(seed, a.ops, a.timeout)
        except _pytest.outcomes.Failed as e:
            print(f"FAILED {label}\n{e}", flush=True)
            return 1
        print(f"ok {label}: {res.checks} checks, {time.monotonic() - t0:.1f} s", flush=True)
        done += 1
    print(f"{done} seeds passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
