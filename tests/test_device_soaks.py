"""Random soaks of the device paths (tests/device_soak.py, tests/thread_soak.py; the benchmarks
of the same names run more seeds), and the pinned-reserve hang the first soak found."""
import pytest

from harness import mixed_hosts, run_world


# ---- a random soak of the device paths (tests/device_soak.py; benchmarks/device_soak.py runs more) ----

@pytest.mark.parametrize("seed", [3, 11, 29, 42, 57, 68])
def test_random_soak_of_device_paths(seed):
    """One seed = one job (world, transport, staging settings, copies, algorithm, a slow rank)
    and 150 operations drawn alike on every rank: any collective (the v forms too; some on a
    sub-communicator beside the whole one) or a p2p ring, any dtype and
    reduction, counts from 0 to 200003, each rank's buffers on the host or either simulated
    device per call, some ordered on a user's stream and waited for there, in asynchronous
    batches of up to four; every result exact against numpy."""
    import device_soak
    world, transport, hosts, env, slow, res = device_soak.run_seed(seed, 150, timeout=240)
    assert res.checks >= 150 * world // 2, res.checks
    assert all(r["ops"] == 150 for r in res)
    assert len({k for r in res for k in r["kinds"]}) == 3  # host and both devices took part


@pytest.mark.parametrize("seed", [0, 3, 19, 66])
def test_random_soak_with_threads(seed):
    """The soak with 2-4 threads per rank (tests/thread_soak.py), each on a communicator of its
    own (the world, split copies), some handing their operations to another thread to wait for
    and check, one thread reading describe() and estimate() of them all meanwhile, the copies
    destroyed by their threads while the others run; every result exact against numpy. Seed 0
    (3 ranks on 2 hosts, 4 threads) timed out on every run before stream waits by signal were
    kept to one communicator; seed 19's watcher got InvalidArgument from estimate() (rhd forced on
    3 ranks); seed 66 (4 ranks, 3 threads) timed out in one run of three while the endpoints of
    three communicators spent the pinned reserve and a staged copy went by the engine behind a
    user's read (StagedEndpoint::hop_for: the device's hop of the process)."""
    import thread_soak
    world, transport, hosts, env, slow, res = thread_soak.run_seed_threads(seed, 60, timeout=240)
    n = thread_soak.threads_for(seed)
    assert all(r["issued"] == [60] * n for r in res), res
    assert res.checks >= 60 * n * world // 2, res.checks


def test_device_pools_past_the_pinned_reserve_do_not_hang():
    """Found by the soak: while a stream waits on a signal (Work.wait(stream=)), pinned memory
    comes from the backend's bounded reserve; one connection's receive-ahead pool of 4 KiB slots
    took all of it, the next connection's first slot came pageable, its copies went by the copy
    engine and queued behind the user's read of the result on that stream, which waited for this
    very operation: a hang until the timeout. Pools now keep to two slots while pinned memory is
    scarce and the device has a pinned hop made before the pools spend the reserve
    (StagedEndpoint::hop_for; first one per endpoint and direction, now one per device).
    Whole mode too: a message-sized slot past the reserve's blocks went the same way; it now
    moves through the hop by pieces. And shared slots (one host): a chunk through the
    device's hop must not be copied out of a slot hop it never had (a crash the soak found
    in the first version of this fix)."""
    base = {"op": "sum", "root": 0, "in_place": False, "counts": [0, 0, 0], "matrix": [[0] * 3] * 3,
            "sub": False, "shift": 1, "batch_end": True, "stream": True}
    ops = [dict(base, i=0, coll="sendrecv", dtype="float32", count=200003, shift=1, kinds=["host", "host", "sim0"]),
           dict(base, i=1, coll="all_to_all", dtype="float64", count=200003, shift=1, kinds=["host", "host", "sim0"]),
           dict(base, i=2, coll="all_reduce", dtype="float32", count=300001, shift=1, kinds=["sim0", "host", "sim1"]),
           dict(base, i=3, coll="gather", dtype="int64", count=65537, root=1, kinds=["sim1", "sim1", "sim0"])]
    small = {"UCCL_STAGED": "on", "UCCL_STAGED_CHUNK_BYTES": "4K", "UCCL_STAGED_BOUNCE_BYTES": "1M"}
    for env, hosts in ((small, mixed_hosts(3, 2)), ({"UCCL_STAGED": "off"}, mixed_hosts(3, 2)),
                       (dict(small, UCCL_STAGED_SHARED="on", UCCL_ALGO="ring"), None)):
        res = run_world(3, "device_soak:soak", (5, 0, (), True, ops), env=env, host_ids=hosts,
                        timeout=120, comm_timeout=20)
        assert res[2]["on_streams"] == 4 and res[0]["on_streams"] == 2, res
