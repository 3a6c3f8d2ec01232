"""Shared helpers for the torch backend tests: free ports, bounded multi-process runs, and
tensor comparisons that say which op, dtype and rank went wrong."""
import datetime
import faulthandler
import os
import signal
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# Every test run is bounded: a hang is a failure, never a stuck CI job.
DEFAULT_DEADLINE_S = 150


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, fn, world, port, args):
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # spawn() dumps stacks of a hang
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.manual_seed(1234)
    fn(rank, world, port, *args)


def spawn(fn, world, *args, deadline_s=DEFAULT_DEADLINE_S):
    """Runs fn(rank, world, port, *args) in `world` fresh processes; raises the first failure.

    fn must be a module-level function (spawned processes import it by name)."""
    port = free_port()
    ctx = mp.start_processes(_entry, args=(fn, world, port, args), nprocs=world, join=False, start_method="spawn")
    end = time.monotonic() + deadline_s
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > end:
                from harness import native_stacks  # tests/ (the parent's path; only on a hang)

                alive = [(r, p) for r, p in enumerate(ctx.processes) if p.is_alive()]
                for r, p in alive[:2]:  # below Python: the CUDA call, lock or futex each waits in
                    text = native_stacks(p.pid)
                    if text:
                        print(f"--- rank {r}, native stacks (gdb):\n{text}", file=sys.stderr, flush=True)
                for r, p in alive:
                    os.kill(p.pid, signal.SIGUSR1)
                time.sleep(2)
                raise TimeoutError(f"{fn.__name__} with world size {world} did not finish in {deadline_s}s (hang)")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()


def init_uccl(rank, world, port, timeout_s=60, pg_options=None):
    dist.init_process_group(
        "uccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout_s),
        pg_options=pg_options,
    )


def assert_same(actual, expected, what):
    """Exact for integers/bool, tolerant for floating types (reduction order may differ)."""
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if actual.is_floating_point() or actual.is_complex():
        tol = {torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(actual.dtype, 1e-5)
        torch.testing.assert_close(actual, expected, rtol=tol, atol=tol, msg=lambda m: f"{what}: {m}")
    else:
        assert torch.equal(actual, expected), f"{what}:\n uccl  {actual}\n expect {expected}"


def make_input(rank, numel, dtype, salt=0):
    """Deterministic per-rank values that are exact in every dtype (small integers)."""
    g = torch.Generator().manual_seed(1000 * rank + 17 * numel + salt)
    if dtype == torch.bool:
        return torch.randint(0, 2, (numel,), generator=g).bool()
    if dtype.is_complex:
        re = torch.randint(-4, 5, (numel,), generator=g).to(torch.float32)
        im = torch.randint(-4, 5, (numel,), generator=g).to(torch.float32)
        return torch.complex(re, im).to(dtype)
    lo = 0 if dtype == torch.uint8 else -4
    return torch.randint(lo, 5, (numel,), generator=g).to(dtype)


def all_reduce_while_peers_wait(rank, x, key):
    """Rank 0 issues an async all_reduce of x and calls wait(); the others join only once that
    wait() returned (a store key), so a wait() that blocks the host deadlocks until the timeout.
    Returns, on rank 0, whether the work was still running when wait() returned (None elsewhere)."""
    store = dist.distributed_c10d._get_default_store()
    if rank != 0:
        store.wait([key], datetime.timedelta(seconds=60))
        dist.all_reduce(x)
        return None
    w = dist.all_reduce(x, async_op=True)
    t0 = time.monotonic()
    w.wait()
    assert time.monotonic() - t0 < 5.0, "wait() blocked the host"
    running = not w.is_completed()
    store.set(key, "1")
    return running
