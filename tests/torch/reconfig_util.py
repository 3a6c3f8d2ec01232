"""Helpers for the reconfiguration tests (test_torch_reconfigure.py): the rendezvous store is
served by the test process itself (as torchft's lighthouse/manager would serve it, never by a
rank that may die), the ranks are plain spawned processes that report through that store, and
every run is bounded by a deadline that kills stragglers."""
import datetime
import faulthandler
import io
import multiprocessing as mp
import os
import signal
import time

import torch
import torch.distributed as dist

import torch_dist_util as U


def serve_store():
    """A TCPStore server in the test process (port 0: the OS picks a free one)."""
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=60))


def client(port, timeout_s=60):
    return dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=timeout_s))


def put(store, key, obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    store.set(key, buf.getvalue())


def take(store, key):
    return torch.load(io.BytesIO(store.get(key)), weights_only=False)


def _entry(fn, who, port, args):
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # run() dumps stacks of a hang
    torch.manual_seed(1234)
    fn(who, port, *args)


def run(fn, names, port, *args, deadline_s=U.DEFAULT_DEADLINE_S, may_die=()):
    """Runs fn(name, port, *args) in one spawned process per name; raises if one fails (exit code
    not 0) unless its name is in may_die, or if they are not all done within deadline_s."""
    ctx = mp.get_context("spawn")
    procs = {n: ctx.Process(target=_entry, args=(fn, n, port, args), daemon=True) for n in names}
    for p in procs.values():
        p.start()
    end = time.monotonic() + deadline_s
    try:
        for n, p in procs.items():
            p.join(max(0.0, end - time.monotonic()))
            if p.is_alive():
                for q in procs.values():
                    if q.is_alive():
                        os.kill(q.pid, signal.SIGUSR1)
                time.sleep(2)
                raise TimeoutError(f"{fn.__name__}: process {n} did not finish in {deadline_s}s (hang)")
        bad = {n: p.exitcode for n, p in procs.items() if p.exitcode != 0 and n not in may_die}
        assert not bad, f"{fn.__name__}: processes failed (name: exit code): {bad}"
        return {n: p.exitcode for n, p in procs.items()}
    finally:
        for p in procs.values():
            if p.is_alive():
                p.kill()
                p.join(5)


def resources():
    """What a communicator holds in this process: threads, open fds, uccl shm segments (named
    /uccl-<pid>-... in /dev/shm, or still mapped after their unlink)."""
    pid = os.getpid()
    shm = [f for f in os.listdir("/dev/shm") if f.startswith(f"uccl-{pid}-")] if os.path.isdir("/dev/shm") else []
    with open("/proc/self/maps") as f:
        mapped = sorted({line.split()[-1] for line in f if "/uccl-" in line})
    return {"threads": len(os.listdir("/proc/self/task")), "fds": len(os.listdir("/proc/self/fd")),
            "shm": len(shm), "mapped": len(mapped)}
