"""ProcessGroup._register_on_completion_hook on uccl groups (NCCL's alone in torch): the hook
sees every work that finishes, succeeded or failed, with its op type, sequence number and times;
one hook per group; none after the group is destroyed."""
import pytest
import uccl

if not uccl.build_info().get("torch"):  # the build says so; never guess from imports
    pytest.skip("uccl built without the torch backend", allow_module_level=True)

import datetime
import threading
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import OpType

import torch_dist_util as U


def wait_for(infos, lock, n, what):
    end = time.monotonic() + 30
    while True:
        with lock:
            if len(infos) >= n:
                return list(infos)
        assert time.monotonic() < end, f"{what}: {len(infos)} of {n} hook calls"
        time.sleep(0.01)


def hooks_worker(rank, world, port):
    U.init_uccl(rank, world, port)
    pg = dist.group.WORLD
    infos, lock = [], threading.Lock()

    def hook(info):
        with lock:
            infos.append((info.op_type, info.seq, info.time_started, info.time_finished, info.active_duration))

    pg._register_on_completion_hook(hook)
    with pytest.raises(RuntimeError, match="already registered"):
        pg._register_on_completion_hook(hook)
    t = torch.ones(1000)
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    if rank == 0:
        dist.send(t, 1)
    else:
        dist.recv(t, 0)
    dist.barrier()
    got = wait_for(infos, lock, 5, "five ops")
    kinds = [g[0] for g in got[:5]]
    want = [OpType.ALLREDUCE, OpType.BROADCAST, OpType.ALLREDUCE,
            OpType.SEND if rank == 0 else OpType.RECV, OpType.BARRIER]
    assert sorted(map(str, kinds)) == sorted(map(str, want)), (kinds, want)
    for op, seq, started, finished, active in got:
        assert finished >= started and active >= datetime.timedelta(0), (op, started, finished, active)
    assert len({g[1] for g in got}) == len(got), [g[1] for g in got]  # one call per work
    # A failed work is reported too: a receive nobody answers, on a group with a 1 s timeout.
    g1 = dist.new_group(backend="uccl", timeout=datetime.timedelta(seconds=1))
    dist.barrier(group=g1)
    infos1, lock1 = [], threading.Lock()
    g1._register_on_completion_hook(lambda i: (lock1.acquire(), infos1.append(i.op_type), lock1.release()))
    if rank == 0:
        w = dist.irecv(torch.empty(4), src=1, group=g1)
        with pytest.raises(Exception):
            w.wait()
        end = time.monotonic() + 30
        while str(OpType.RECV) not in [str(k) for k in wait_for(infos1, lock1, 1, "the failed recv")]:
            assert time.monotonic() < end, infos1
            time.sleep(0.01)
    dist.barrier()
    dist.destroy_process_group()


def test_on_completion_hook_sees_every_work():
    U.spawn(hooks_worker, 2, deadline_s=120)


def pending_worker(rank, world, port):
    U.init_uccl(rank, world, port)
    pg = dist.group.WORLD
    assert not pg._has_hooks()
    pg._enable_collectives_timing()  # uccl times every work: accepted, nothing to turn on
    seen, lock = [], threading.Lock()

    def slow_hook(info):
        time.sleep(0.02)  # hooks still running when destroy_process_group is called
        with lock:
            seen.append(info.seq)

    pg._register_on_completion_hook(slow_hook)
    assert pg._has_hooks()  # what destroy_process_group reads before waiting for pending works
    works = [dist.all_reduce(torch.full((1 << 16,), float(i)), async_op=True) for i in range(20)]
    pg._wait_for_pending_works()
    with lock:
        assert len(seen) == 20, seen
    assert all(w.is_completed() for w in works)
    assert works[-1]._get_duration() >= 0
    more = [dist.all_reduce(torch.ones(1 << 16), async_op=True) for _ in range(10)]
    # torch's destroy_process_group waits for pending works (and their hooks) on a group with a
    # hook: every hook has run when it returns, none is lost to the shutdown.
    dist.destroy_process_group()
    with lock:
        assert len(seen) == 30 and len(set(seen)) == 30, seen
    assert all(w.is_completed() for w in more)


def test_wait_for_pending_works_and_destroy_run_every_hook():
    U.spawn(pending_worker, 2, deadline_s=120)
