"""Communicator.shrink (survivors agree on the failed ranks: cpp/core/agreement.h) and
Communicator.grow / join (ranks started later join a running job). The bodies run inside the
ranks started by harness.run_world; every survivor must get the same new communicator and an
exact all_reduce on it, a rank killed during the agreement (the coordinator too) must not stop
the others, a slow rank must be excluded with AbortedError, and a joiner whose configuration
differs must get MismatchError on both sides."""
import os
import signal
import time

import numpy as np
import pytest

from harness import run_world


def _exact_sum(comm, old_rank, survivors):
    """all_reduce of (old rank + 1) * ones: the sum over the survivors' old ranks, exactly."""
    x = np.full(1031, old_rank + 1, np.int64)
    comm.all_reduce(x)
    return bool((x == sum(r + 1 for r in survivors)).all())


def _wait_all(store, key, n, server, timeout=60):
    """A store barrier of n ranks, after which the rank serving the store (it leaves last: the
    others must not find it gone) waits until the others have seen the barrier complete."""
    store.add(key, 1)
    end = time.time() + timeout
    while store.add(key, 0) < n and time.time() < end:
        time.sleep(0.01)
    store.add(key + "/left", 1)
    while server and store.add(key + "/left", 0) < n and time.time() < end:
        time.sleep(0.01)


def body_shrink_after_kill(ctx, victims, kill_at):
    """The victims SIGKILL themselves before operation kill_at; the survivors see the error,
    shrink, and all_reduce exactly on the new communicator."""
    import uccl
    ctx.linger = False
    comm, me = ctx.comm, ctx.rank
    err = None
    for i in range(1000):
        if i == kill_at and me in victims:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            comm.all_reduce(np.ones(4096, np.float32))
        except uccl.UcclError as e:
            err = e
            break
    new = comm.shrink()
    survivors = [r for r in range(ctx.world) if r not in victims]
    ok = _exact_sum(new, me, survivors)
    new.barrier()  # rank 0 of the new communicator serves its store: leave together
    return {"error": type(err).__name__, "rank": new.rank, "size": new.size, "exact": ok}


def _check(results, world, victims):
    survivors = [r for r in range(world) if r not in victims]
    for r in survivors:
        res = results[r]
        assert res["error"] in ("RemoteError", "AbortedError"), res
        assert res["size"] == len(survivors), res
        assert res["rank"] == survivors.index(r), res
        assert res["exact"], res


@pytest.mark.timeout(300)
@pytest.mark.parametrize("victim", [0, 1, 3])
def test_survivors_shrink_after_a_kill_and_reduce_exactly(victim):
    """victim 0: the rank whose process served the store dies; the survivors' store is re-created."""
    results = run_world(4, "test_shrink:body_shrink_after_kill", args=([victim], 3), expect_exit={victim},
                        timeout=120, grace=30, comm_timeout=20)
    _check(results, 4, [victim])


@pytest.mark.timeout(300)
def test_two_ranks_die_over_tcp_and_shm():
    results = run_world(5, "test_shrink:body_shrink_after_kill", args=([1, 4], 2), expect_exit={1, 4},
                        host_ids=["a", "a", "a", "b", "b"], timeout=120, grace=30, comm_timeout=20)
    _check(results, 5, [1, 4])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("point", ["prepare", "accept", "commit"])
def test_coordinator_killed_during_the_agreement(point):
    """Rank 3 dies; rank 0 coordinates the agreement and dies at `point` (after committing to
    one rank, for "commit": that rank's decision must be adopted by everyone)."""
    world = 4
    results = run_world(world, "test_shrink:body_agreement_victim", args=(3, point), expect_exit={0, 3},
                        rank_env=lambda r: {"UCCL_AGREE_KILL_POINT": point} if r == 0 else {},
                        timeout=150, grace=60, comm_timeout=20)
    survivors = [1, 2]
    for r in survivors:
        res = results[r]
        assert res["size"] == 2 and res["rank"] == survivors.index(r) and res["exact"], res


@pytest.mark.timeout(300)
def test_shrink_with_a_job_key():
    """Keyed mode: the agreement's MACs and the new store's challenge-response use the job key."""
    results = run_world(3, "test_shrink:body_shrink_after_kill", args=([0], 2), expect_exit={0},
                        env={"UCCL_JOB_KEY": "shrink-test-key-0123456789"}, timeout=120, grace=30, comm_timeout=20)
    _check(results, 3, [0])


def body_agreement_victim(ctx, victim, point):
    """Like body_shrink_after_kill, but the survivors' expected set is learned from the new size
    (rank 0 dies inside shrink, so it never returns)."""
    import uccl
    ctx.linger = False
    comm, me = ctx.comm, ctx.rank
    for i in range(1000):
        if i == 2 and me == victim:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            comm.all_reduce(np.ones(4096, np.float32))
        except uccl.UcclError:
            break
    new = comm.shrink()
    survivors = [r for r in range(ctx.world) if r not in (0, victim)]
    ok = _exact_sum(new, me, survivors)
    new.barrier()
    return {"rank": new.rank, "size": new.size, "exact": ok}


def body_sub_communicator(ctx):
    """A sub-communicator of ranks 0, 1, 2 loses rank 2 and shrinks; rank 3 is in none of it."""
    import uccl
    ctx.linger = False
    sub = ctx.comm.new_group([0, 1, 2])
    if sub is None:
        _wait_all(ctx.store, "sub-done", ctx.world - 1, ctx.rank == 0)
        return {"in": False}
    sub.all_reduce(np.ones(8, np.float32))
    if ctx.rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for _ in range(1000):
            sub.all_reduce(np.ones(4096, np.float32))
    except uccl.UcclError:
        pass
    new = sub.shrink()
    ok = _exact_sum(new, sub.rank, [0, 1])
    new.barrier()
    _wait_all(ctx.store, "sub-done", ctx.world - 1, ctx.rank == 0)
    return {"in": True, "rank": new.rank, "size": new.size, "exact": ok}


@pytest.mark.timeout(300)
def test_sub_communicator_shrinks():
    results = run_world(4, "test_shrink:body_sub_communicator", expect_exit={2}, timeout=120, grace=30, comm_timeout=20)
    assert results[3] == {"in": False}
    for r in (0, 1):
        assert results[r] == {"in": True, "rank": r, "size": 2, "exact": True}, results[r]


def body_slow_rank(ctx, slow):
    """Nobody died, but `slow` enters shrink long after the others' timeout: they exclude it,
    and it learns so (AbortedError) instead of hanging or forming a communicator of its own."""
    import uccl
    ctx.linger = False
    comm, me = ctx.comm, ctx.rank
    comm.all_reduce(np.ones(8, np.float32))
    if me == slow:
        while ctx.store.add("shrunk", 0) < ctx.world - 1:
            time.sleep(0.05)
        try:
            comm.shrink()
        except uccl.AbortedError as e:
            ctx.store.set("slow-done", b"1")
            return {"excluded": True, "msg": str(e)}
        ctx.store.set("slow-done", b"1")
        return {"excluded": False}
    new = comm.shrink()
    ok = _exact_sum(new, me, [r for r in range(ctx.world) if r != slow])
    ctx.store.add("shrunk", 1)
    ctx.store.get("slow-done", 60)  # the decision is served while the new communicator lives
    new.barrier()
    return {"rank": new.rank, "size": new.size, "exact": ok}


@pytest.mark.timeout(300)
def test_slow_rank_is_excluded_consistently():
    results = run_world(3, "test_shrink:body_slow_rank", args=(2,), timeout=150, grace=60, comm_timeout=3)
    assert results[2]["excluded"] and "excluded" in results[2]["msg"], results[2]
    for r in (0, 1):
        assert results[r] == {"rank": r, "size": 2, "exact": True}, results[r]


def body_shrink_excluding(ctx, dead, live_excluded, first_list):
    """`dead` SIGKILL themselves; `live_excluded` stay alive (waiting on the store) and never
    call shrink. The others shrink with `first_list` to exclude: when it misses a dead rank,
    RemoteError names that rank, and a second call with every excluded rank forms the
    communicator of exactly the others."""
    import uccl
    ctx.linger = False
    comm, me = ctx.comm, ctx.rank
    comm.all_reduce(np.ones(8, np.float32))
    if me in dead:
        os.kill(os.getpid(), signal.SIGKILL)
    everyone_out = sorted(set(dead) | set(live_excluded))
    survivors = [r for r in range(ctx.world) if r not in everyone_out]
    if me in live_excluded:
        # Alive and left out: waits (a store server may live here) until the others are done.
        _wait_all(ctx.store, "excluded-done", len(survivors) + len(live_excluded), me == 0)
        return {"excluded": True}
    first = None
    t0 = time.monotonic()
    try:
        new = comm.shrink(exclude=first_list)
    except uccl.RemoteError as e:
        first = {"error": type(e).__name__, "peer": e.peer, "msg": str(e)}
        new = comm.shrink(exclude=everyone_out)
    took = time.monotonic() - t0
    ok = _exact_sum(new, me, survivors)
    new.barrier()
    _wait_all(ctx.store, "excluded-done", len(survivors) + len(live_excluded), me == 0)
    return {"rank": new.rank, "size": new.size, "exact": ok, "first": first, "took": took}


@pytest.mark.timeout(300)
def test_shrink_excluding_live_ranks_does_not_wait_for_them():
    """torch's shrink_group contract: the excluded ranks (here rank 2, alive, and rank 0, alive
    and serving the job's store) do not call. The survivors agree without asking them, so not a
    timeout later: the communicator's timeout is 30 s."""
    results = run_world(5, "test_shrink:body_shrink_excluding", args=([], [0, 2], [0, 2]), timeout=150,
                        grace=60, comm_timeout=30)
    survivors = [1, 3, 4]
    for r in survivors:
        res = results[r]
        assert res["first"] is None and res["size"] == 3 and res["rank"] == survivors.index(r) and res["exact"], res
        assert res["took"] < 15, res
    assert results[0] == {"excluded": True} and results[2] == {"excluded": True}


@pytest.mark.timeout(300)
def test_shrink_excluding_names_a_rank_that_failed_too():
    """Ranks 1 and 3 die; the survivors exclude only rank 1. The agreement finds rank 3 dead as
    well: every survivor gets RemoteError naming rank 3 (nothing formed, no renumbering behind
    the caller's back), then excluding both forms the communicator of ranks 0 and 2."""
    results = run_world(4, "test_shrink:body_shrink_excluding", args=([1, 3], [], [1]), expect_exit={1, 3},
                        timeout=150, grace=60, comm_timeout=5)
    for r in (0, 2):
        res = results[r]
        assert res["first"] and res["first"]["error"] == "RemoteError" and res["first"]["peer"] == 3, res
        assert "rank 3 failed too" in res["first"]["msg"], res
        assert res["size"] == 2 and res["rank"] == (0, 2).index(r) and res["exact"], res


def body_grow(ctx, old_world, tag):
    """Ranks < old_world run a communicator of old_world ranks, then grow it; the others join."""
    import uccl
    store = uccl.TcpStore("127.0.0.1", ctx.port, is_server=(ctx.rank == 0), timeout=30)
    if ctx.rank < old_world:
        comm = uccl.Communicator(ctx.rank, old_world, store, timeout=30)
        x = np.ones(16, np.float32)
        comm.all_reduce(x)
        assert x[0] == old_world
        try:
            new = comm.grow(ctx.world, tag)
        except uccl.UcclError as e:
            _wait_all(store, "grow-done", ctx.world, ctx.rank == 0)  # rank 0 serves the store
            return {"error": type(e).__name__, "msg": str(e)}
    else:
        try:
            new = uccl.Communicator.join(store, tag, timeout=30)
        except uccl.UcclError as e:
            _wait_all(store, "grow-done", ctx.world, ctx.rank == 0)
            return {"error": type(e).__name__, "msg": str(e)}
    x = np.full(1031, new.rank + 1, np.int64)
    new.all_reduce(x)
    new.barrier()
    _wait_all(store, "grow-done", ctx.world, ctx.rank == 0)
    return {"rank": new.rank, "size": new.size, "exact": bool((x == sum(range(1, ctx.world + 1))).all())}


@pytest.mark.timeout(300)
def test_two_ranks_grow_by_two_joiners():
    results = run_world(4, "test_shrink:body_grow", args=(2, "step100"), make_comm=False, timeout=120)
    assert sorted(r["rank"] for r in results) == [0, 1, 2, 3]
    assert results[0]["rank"] == 0 and results[1]["rank"] == 1
    assert all(r["size"] == 4 and r["exact"] for r in results), results


@pytest.mark.timeout(300)
@pytest.mark.parametrize("setting,value,word", [("UCCL_TRANSPORT", "tcp", "transport"),
                                                ("UCCL_SMALL_MSG_BYTES", "1K", "UCCL_SMALL_MSG_BYTES")],
                         ids=["transport", "job-wide-setting"])
def test_joiner_with_another_setting_is_refused_on_both_sides(setting, value, word):
    results = run_world(3, "test_shrink:body_grow", args=(2, "mismatch"), make_comm=False, timeout=120,
                        rank_env=lambda r: {setting: value} if r == 2 else {})
    for r in results:
        assert r["error"] == "MismatchError", r
        assert word in r["msg"], r


def test_shrink_and_grow_check_their_arguments():
    import uccl
    from harness import free_port
    port = free_port()
    store = uccl.TcpStore("127.0.0.1", port, is_server=True, timeout=10)
    comm = uccl.Communicator(0, 1, store, timeout=10)
    with pytest.raises(uccl.InvalidArgument):
        comm.grow(0, "x")
    with pytest.raises(uccl.InvalidArgument):
        comm.grow(2, "bad tag")
    with pytest.raises(uccl.InvalidArgument):
        uccl.Communicator.join(store, "a/b")
    comm.monitored_barrier(timeout=0)  # a world of one: nobody to wait for
    for bad in ([0], [1], [-1]):  # this rank itself; outside the communicator of size 1
        with pytest.raises(uccl.InvalidArgument):
            comm.shrink(exclude=bad)
    alone = comm.shrink()  # a world of one: nobody to agree with
    assert (alone.rank, alone.size) == (0, 1)
    x = np.arange(5, dtype=np.float32)
    alone.all_reduce(x)
    assert x.tolist() == [0, 1, 2, 3, 4]
