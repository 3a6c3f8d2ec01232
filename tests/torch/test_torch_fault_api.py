"""torch.distributed's fault-handling calls on uccl groups, which torch itself offers for one
backend each:

* dist.shrink_group(ranks_to_exclude, group) (NCCL's ncclCommShrink in torch): uccl's agreed
  shrink with the ranks named (Communicator::shrink_excluding). Excluded ranks do not call and
  may be alive (not waited for); a dead rank is excluded after its failure; a list that misses a
  dead rank gets DistBackendError naming it and a second call naming it too forms the group; the
  shrunk default group keeps working (collectives, new subgroups).
* ProcessGroup.monitored_barrier / uccl.torch.monitored_barrier (Gloo's alone in torch): rank 0
  names the ranks that did not arrive within the timeout (Gloo's words), a dead rank at once,
  and the others learn that rank 0 failed.
"""
import pytest
import uccl

if not uccl.build_info().get("torch"):  # the build says so; never guess from imports
    pytest.skip("uccl built without the torch backend", allow_module_level=True)

import datetime
import os
import time

import torch
import torch.distributed as dist

import uccl.torch as ut
import torch_dist_util as U


def exact_sum(group, global_ranks, me):
    """all_reduce of (original rank `me` + 1): the sum over `global_ranks`, exactly."""
    t = torch.full((1031,), float(me + 1), dtype=torch.float64)
    dist.all_reduce(t, group=group)
    want = float(sum(r + 1 for r in global_ranks))
    assert bool((t == want).all()), f"rank {me}: {t[0].item()} != {want}"


def sync(store, key, n, server=False):
    """A store barrier of n ranks. The rank whose process serves the store (rank 0: pass
    server=True where it leaves after this) waits until the others have seen it complete."""
    store.add(key, 1)
    end = time.monotonic() + 60
    while store.add(key, 0) < n:
        assert time.monotonic() < end, f"sync {key}: {store.add(key, 0)} of {n}"
        time.sleep(0.01)
    store.add(key + "/left", 1)
    while server and store.add(key + "/left", 0) < n:
        assert time.monotonic() < end, f"sync {key}: {store.add(key + '/left', 0)} of {n} left"
        time.sleep(0.01)


def shrink_worker(rank, world, port):
    U.init_uccl(rank, world, port, timeout_s=20)
    store = dist.distributed_c10d._get_default_store()  # served by rank 0, which stays
    # 1. A subgroup leaves out rank 1, which is alive and does not call: not waited for.
    sub = dist.new_group(backend="uccl")
    exact_sum(sub, range(world), rank)
    if rank == 1:
        sync(store, "sub-shrunk", world)
    else:
        start = time.monotonic()
        new = dist.shrink_group([1], group=sub)
        took = time.monotonic() - start
        assert took < 10, f"shrink_group waited {took:.1f} s for the live excluded rank (timeout 20 s)"
        assert new.size() == world - 1 and dist.get_backend(new) == "uccl", (new.size(), dist.get_backend(new))
        assert dist.get_process_group_ranks(new) == [0, 2, 3], dist.get_process_group_ranks(new)
        exact_sum(new, [0, 2, 3], rank)
        dist.barrier(group=new)
        sync(store, "sub-shrunk", world)
    # 2. Rank 3 dies; the default group fails naming it, shrinks without it and goes on.
    dist.barrier()
    if rank == 3:
        sync(store, "before-death", world)
        os._exit(0)
    sync(store, "before-death", world)
    with pytest.raises(dist.DistBackendError, match="rank 3"):
        for _ in range(100):
            dist.all_reduce(torch.ones(4096))
    new_world = dist.shrink_group([3])
    assert dist.get_world_size() == 3 and dist.get_rank() == rank, (dist.get_world_size(), dist.get_rank())
    assert new_world is dist.group.WORLD or new_world == dist.distributed_c10d._get_default_group()
    exact_sum(None, [0, 1, 2], rank)
    outs = [torch.zeros(3) for _ in range(3)]
    dist.all_gather(outs, torch.full((3,), float(rank)))
    assert [o[0].item() for o in outs] == [0.0, 1.0, 2.0], outs
    pair = dist.new_group([0, 2], backend="uccl")  # subgroups of the shrunk world
    if rank in (0, 2):
        exact_sum(pair, [0, 2], rank)
    dist.barrier()
    sync(store, "done", 3, server=rank == 0)
    os._exit(0)  # the torch groups' teardown is not what this test checks


def test_shrink_group_live_excluded_dead_rank_and_default_group():
    U.spawn(shrink_worker, 4, deadline_s=180)


def shrink_missed_worker(rank, world, port):
    U.init_uccl(rank, world, port, timeout_s=5)
    store = dist.distributed_c10d._get_default_store()
    dist.barrier()
    if rank in (1, 3):
        sync(store, "before-death", world)
        os._exit(0)
    sync(store, "before-death", world)
    # The list misses rank 3: nothing is formed and every survivor is told which rank to add.
    with pytest.raises(dist.DistBackendError, match="rank 3 failed too"):
        dist.shrink_group([1])
    dist.shrink_group([1, 3])
    assert dist.get_world_size() == 2 and dist.get_rank() == (0, 2).index(rank)
    exact_sum(None, [0, 2], rank)
    dist.barrier()
    sync(store, "done", 2, server=rank == 0)
    os._exit(0)


def test_shrink_group_names_a_dead_rank_missing_from_the_list():
    U.spawn(shrink_missed_worker, 4, deadline_s=180)


def monitored_barrier_worker(rank, world, port):
    U.init_uccl(rank, world, port, timeout_s=30)
    store = dist.distributed_c10d._get_default_store()
    # Everyone arrives: both entry points pass, and p2p of the caller's is undisturbed.
    ut.monitored_barrier(timeout=10)
    dist.group.WORLD.monitored_barrier(datetime.timedelta(seconds=10), wait_all_ranks=True)
    if rank == 0:
        dist.send(torch.arange(5.0), 1)
    elif rank == 1:
        t = torch.zeros(5)
        dist.recv(t, 0)
        assert t.tolist() == [0, 1, 2, 3, 4], t
    ut.monitored_barrier()  # the group's timeout
    ut.monitored_barrier(group=dist.new_group(backend="gloo"), timeout=10)  # goes to torch's own

    # Rank 2 stays away: rank 0 names it in Gloo's words, rank 1 learns rank 0 failed.
    g = dist.new_group(backend="uccl")
    dist.barrier(group=g)
    if rank == 2:
        sync(store, "one-missing", world)
    else:
        pattern = (r"\[Rank 0\]: Rank 2 failed to pass monitoredBarrier in 2000 ms" if rank == 0
                   else "Rank 1 successfully reached monitoredBarrier, but received errors while waiting for "
                        "send/recv from rank 0")
        with pytest.raises(dist.DistBackendError, match=pattern):
            ut.monitored_barrier(group=g, timeout=datetime.timedelta(seconds=2))
        sync(store, "one-missing", world)

    # A timeout of 0 on rank 0: Gloo's "timed out" at once, without a message sent.
    if rank == 0:
        with pytest.raises(dist.DistBackendError, match="Rank 0 timed out in monitoredBarrier after 0 ms"):
            dist.group.WORLD.monitored_barrier(datetime.timedelta(0))

    # Ranks 1 and 2 stay away; wait_all_ranks names both.
    g = dist.new_group(backend="uccl")
    dist.barrier(group=g)
    if rank == 0:
        with pytest.raises(dist.DistBackendError, match="Ranks 1, 2 failed to pass monitoredBarrier in 1500 ms"):
            ut.monitored_barrier(group=g, timeout=1.5, wait_all_ranks=True)
    sync(store, "two-missing", world)

    # Rank 2 dies: named at once, well before the 30 s timeout.
    g = dist.new_group(backend="uccl")
    dist.barrier(group=g)
    if rank == 2:
        sync(store, "before-death", world)
        os._exit(0)
    sync(store, "before-death", world)
    if rank == 0:
        start = time.monotonic()
        with pytest.raises(dist.DistBackendError, match="Rank 2 failed to pass monitoredBarrier"):
            ut.monitored_barrier(group=g, timeout=30)
        assert time.monotonic() - start < 15, time.monotonic() - start
    sync(store, "done", 2, server=rank == 0)
    os._exit(0)


def test_monitored_barrier_names_the_missing_ranks():
    U.spawn(monitored_barrier_worker, 3, deadline_s=180)
