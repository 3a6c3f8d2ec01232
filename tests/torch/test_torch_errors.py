"""Failures surface as exceptions, never hangs: init_process_group(timeout=) bounds a collective
a peer never joins, a rank that dies fails its peers' ops with DistBackendError naming it,
abort() fails pending work, mismatched calls are reported, and bad arguments raise at the call.
A gloo group beside uccl keeps the ranks in step after uccl has failed."""
import pytest
import uccl

if not uccl.build_info().get("torch"):  # the build says so; never guess from imports
    pytest.skip("uccl built without the torch backend", allow_module_level=True)

import datetime
import os
import tempfile
import time

import torch
import torch.distributed as dist

import torch_dist_util as U
from torch._C._distributed_c10d import ErrorType

CPU = torch.device("cpu")


def timeout_and_abort_worker(rank, world, port):
    U.init_uccl(rank, world, port, timeout_s=3)
    g = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=60))
    backend = dist.group.WORLD._get_backend(CPU)
    t = torch.ones(4)
    dist.all_reduce(t)  # connections up
    assert backend.get_error() == ErrorType.SUCCESS

    # Rank 0 calls a collective that rank 1 never joins: the group's 3 s timeout ends it.
    if rank == 0:
        start = time.monotonic()
        with pytest.raises(dist.DistBackendError) as e:
            dist.all_reduce(t)
        elapsed = time.monotonic() - start
        assert 2.0 < elapsed < 30, f"timed out after {elapsed:.1f}s, expected about 3s"
        assert "all_reduce" in str(e.value), str(e.value)
        assert backend.get_error() != ErrorType.SUCCESS
        # The communicator stays failed: the next op reports it at once.
        with pytest.raises(dist.DistBackendError):
            dist.all_reduce(t)
    dist.barrier(group=g)

    # Nobody calls work.wait(), only the Future is waited on (DDP comm hooks): uccl's progress
    # side enforces the timeout too (here the group's own, from ProcessGroupOptions).
    import uccl

    u3 = dist.new_group(backend="uccl", pg_options=uccl.ProcessGroupOptions(timeout=3))
    dist.all_reduce(t, group=u3)
    if rank == 0:
        fut = dist.all_reduce(t, group=u3, async_op=True).get_future()
        start = time.monotonic()
        with pytest.raises(dist.DistBackendError, match="timeout"):
            fut.wait()
        assert time.monotonic() - start < 30
    dist.barrier(group=g)

    # A fresh uccl group, then abort() with a receive pending: the wait fails, nothing hangs.
    u = dist.new_group(backend="uccl", timeout=datetime.timedelta(seconds=60))
    x = torch.ones(2)
    dist.all_reduce(x, group=u)
    if rank == 0:
        work = dist.irecv(torch.empty(3), group_src=1, group=u)  # rank 1 never sends
        time.sleep(0.2)
        u.abort()
        with pytest.raises(dist.DistBackendError, match="(?i)abort"):
            work.wait()
        with pytest.raises(dist.DistBackendError, match="aborted"):
            dist.all_reduce(x, group=u)
    dist.barrier(group=g)


def test_timeout_and_abort():
    U.spawn(timeout_and_abort_worker, 2)


def dead_rank_worker(rank, world, port):
    U.init_uccl(rank, world, port, timeout_s=120)
    t = torch.ones(1000)
    dist.all_reduce(t)  # every pair connected
    if rank == world - 1:
        os._exit(0)  # dies without a word (exit code 0 so the spawner only judges the others)
    start = time.monotonic()
    with pytest.raises(dist.DistBackendError) as e:
        for _ in range(50):
            dist.all_reduce(t)
    elapsed = time.monotonic() - start
    # Detected from the connection, long before the 120 s timeout.
    assert elapsed < 60, f"dead peer noticed only after {elapsed:.1f}s"
    assert f"rank {world - 1}" in str(e.value), str(e.value)


def test_dead_rank_fails_peers_without_hang():
    U.spawn(dead_rank_worker, 3)


def misuse_worker(rank, world, port):
    import uccl

    U.init_uccl(rank, world, port)
    g = dist.new_group(backend="gloo")
    # Wrong pg_options type is refused with the expected class named.
    with pytest.raises(TypeError, match="ProcessGroupOptions"):
        dist.new_group(backend="uccl", pg_options={"transport": "tcp"})
    # Receive from any source works now (test_torch_conformance.py); inside a batch it is refused.
    cpu = torch.device("cpu")
    dist.group.WORLD._start_coalescing(cpu)
    try:
        with pytest.raises(NotImplementedError, match="any source cannot be part of a batch"):
            dist.group.WORLD.recv_anysource([torch.empty(2)], 0)
    finally:
        dist.group.WORLD._end_coalescing(cpu)
    # Ranks disagreeing on the size of one all_reduce: a mismatch error, not corrupt data.
    u = dist.new_group(backend="uccl", pg_options=uccl.ProcessGroupOptions(timeout=20))
    with pytest.raises(dist.DistBackendError, match="(?i)mismatch|count|size"):
        dist.all_reduce(torch.ones(4 + rank), group=u)
    dist.barrier(group=g)
    # Shutdown, then a new uccl world in the same processes (a file store: no second port).
    dist.destroy_process_group()
    path = os.path.join(tempfile.gettempdir(), f"uccl_reinit_{port}")
    dist.init_process_group("uccl", init_method=f"file://{path}", rank=rank, world_size=world)
    t = torch.full((3,), float(rank))
    dist.all_reduce(t)
    assert t.tolist() == [float(sum(range(world)))] * 3
    dist.destroy_process_group()


def test_misuse_is_reported():
    U.spawn(misuse_worker, 2)
