"""torchft-style reconfiguration of the uccl torch backend (uccl.torch.ReconfigurableProcessGroup):

* training with gradient all_reduce on 4 replicas; one is killed (SIGKILL) mid-training, the
  survivors' all_reduce fails, errored() names the dead rank (uccl.RemoteError, .peer), they
  configure a 3-rank group over a new store prefix and keep training; a replacement process then
  joins (world 4 again), gets the parameters by broadcast, and training goes on. Parameters are
  bitwise equal on every member and equal to a single-process replay of the same batches;
* a rank claimed twice / world sizes that differ: uccl.InvalidArgument on every process at once;
* 20 configure/abort cycles in the same processes leave no thread, fd or shm segment behind, and
  abort() fails a pending receive at once.

The rendezvous store is served by the test process (reconfig_util.serve_store), never by a rank.
"""
import pytest
import uccl

if not uccl.build_info().get("torch"):  # the build says so; never guess from imports
    pytest.skip("uccl built without the torch backend", allow_module_level=True)

import datetime
import os
import signal
import threading
import time

import torch
import torch.distributed as dist

import reconfig_util as R

KILL_STEP = 6          # replica 3 dies at the start of this step
MIN_STEPS = 14         # train at least this long...
STEPS_AFTER_JOIN = 5   # ...and this many steps with the replacement
LR = 0.1


def make_model():
    torch.manual_seed(7)  # same initial parameters on every replica and in the reference
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 1)).double()


def batch(step, replica):
    g = torch.Generator().manual_seed(1000 * step + replica)
    x = torch.randn(8, 6, generator=g, dtype=torch.float64)
    return x, x.sum(dim=1, keepdim=True).sin()


def local_grad(model, step, replica):
    model.zero_grad()
    x, y = batch(step, replica)
    torch.nn.functional.mse_loss(model(x), y).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def apply(model, grad):
    with torch.no_grad():
        off = 0
        for p in model.parameters():
            n = p.numel()
            p -= LR * grad[off:off + n].view_as(p)
            off += n


def set_flat(model, vec):
    with torch.no_grad():
        off = 0
        for p in model.parameters():
            p.copy_(vec[off:off + p.numel()].view_as(p))
            off += p.numel()


def train_worker(replica, port, transport):
    from uccl.torch import ReconfigurableProcessGroup

    store = R.client(port)
    addr = f"127.0.0.1:{port}"
    model = make_model()
    pg = ReconfigurableProcessGroup(timeout=datetime.timedelta(seconds=30),
                                    options=uccl.ProcessGroupOptions(transport=transport))
    history, noticed = [], []
    if replica < 4:
        members, gen, step, joined_at = [0, 1, 2, 3], 0, 0, None
        pg.configure(addr, "gen0", members.index(replica), len(members))
    else:
        # The replacement: waits until the survivors shrank, asks to join, gets its place.
        store.wait(["train/shrunk"], datetime.timedelta(seconds=90))
        store.set("join/request", str(replica))
        gen, members, step = R.take(store, "join/answer")
        joined_at = step
        pg.configure(addr, f"gen{gen}", members.index(replica), len(members))
        params = torch.empty_like(flat(model))
        pg.broadcast([params], dist.BroadcastOptions()).wait()  # rank 0's current parameters
        set_flat(model, params)
    while step < MIN_STEPS or joined_at is None or step < joined_at + STEPS_AFTER_JOIN:
        if replica == 3 and step == KILL_STEP:
            os.kill(os.getpid(), signal.SIGKILL)
        me = members.index(replica)
        # Gradients plus one slot for rank 0's "a replacement asks to join" (a step boundary
        # decision every member learns from the same all_reduce).
        join = 1.0 if me == 0 and joined_at is None and store.check(["join/request"]) else 0.0
        buf = torch.cat([local_grad(model, step, replica), torch.tensor([join], dtype=torch.float64)])
        try:
            pg.allreduce([buf], dist.AllreduceOptions()).wait()
        except dist.DistBackendError as e:
            err = pg.errored()
            assert isinstance(err, uccl.RemoteError), f"errored() gave {err!r} after {e}"
            dead = err.peer
            assert dead is not None and 0 <= dead < len(members), f"errored() names no member: {err!r}"
            noticed.append((step, members[dead], str(e), str(err)))
            # Shrink: the survivors, renumbered in order, over a new prefix; the step is redone.
            members = [m for m in members if m != members[dead]]
            gen += 1
            pg.configure(addr, f"gen{gen}", members.index(replica), len(members))
            if members.index(replica) == 0:
                store.set("train/shrunk", str(gen))
            continue
        history.append((step, list(members)))
        apply(model, buf[:-1] / len(members))
        step += 1
        if buf[-1] > 0:  # grow at this step boundary: the replacement takes the last rank
            joiner = int(store.get("join/request"))
            members = members + [joiner]
            gen += 1
            joined_at = step
            if members.index(replica) == 0:
                R.put(store, "join/answer", (gen, members, step))
            pg.configure(addr, f"gen{gen}", members.index(replica), len(members))
            params = flat(model)
            pg.broadcast([params], dist.BroadcastOptions()).wait()
        time.sleep(0.01)
    pg.barrier(dist.BarrierOptions()).wait()
    R.put(store, f"result/{replica}", {"params": flat(model), "history": history, "noticed": noticed,
                                       "members": members, "rank": pg.rank(), "size": pg.size()})
    pg.shutdown()


def reference(history):
    """One process, the same batches, the same member sets per step."""
    model = make_model()
    for step, members in history:
        grads = [local_grad(model, step, m) for m in members]
        apply(model, torch.stack(grads).sum(0) / len(members))
    return flat(model)


@pytest.mark.parametrize("transport", ["auto", "tcp"])  # auto: shm between these local processes
def test_kill_a_replica_shrink_then_grow(transport):
    store = R.serve_store()
    codes = R.run(train_worker, [0, 1, 2, 3, 4], store.port, transport, may_die=(3,), deadline_s=240)
    assert codes[3] == -signal.SIGKILL, f"replica 3 should have been killed, exit code {codes[3]}"
    res = {r: R.take(store, f"result/{r}") for r in (0, 1, 2, 4)}
    hist = res[0]["history"]
    print("history (step, members):", hist)
    print("noticed:", {r: res[r]["noticed"] for r in (0, 1, 2)})
    # The survivors noticed the death once, at the kill step, naming rank 3 (replica 3).
    for r in (0, 1, 2):
        assert [(s, dead) for s, dead, _, _ in res[r]["noticed"]] == [(KILL_STEP, 3)], res[r]["noticed"]
        _, _, torch_msg, typed_msg = res[r]["noticed"][0]
        assert "rank 3" in typed_msg and "rank 3" in torch_msg, (torch_msg, typed_msg)
        assert res[r]["history"] == hist, f"replica {r} trained on other member sets than replica 0"
    sizes = [len(m) for _, m in hist]
    assert sizes[:KILL_STEP] == [4] * KILL_STEP and sizes[KILL_STEP] == 3, sizes
    join_step = sizes.index(4, KILL_STEP)
    assert all(n == 3 for n in sizes[KILL_STEP:join_step]) and all(n == 4 for n in sizes[join_step:]), sizes
    assert hist[-1][1] == [0, 1, 2, 4] and len(hist) >= join_step + STEPS_AFTER_JOIN
    assert res[4]["history"] == hist[join_step:], "the replacement's steps differ from the survivors'"
    assert [(res[r]["rank"], res[r]["size"]) for r in (0, 1, 2, 4)] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    # Consistent model: bitwise equal everywhere, and equal to the single-process replay.
    for r in (1, 2, 4):
        assert torch.equal(res[r]["params"], res[0]["params"]), f"replica {r}'s parameters differ from replica 0's"
    torch.testing.assert_close(res[0]["params"], reference(hist), rtol=1e-10, atol=1e-12)


def mismatch_worker(name, port):
    from uccl.torch import ReconfigurableProcessGroup

    store = R.client(port)
    addr = f"127.0.0.1:{port}"
    pg = ReconfigurableProcessGroup(timeout=datetime.timedelta(seconds=40))
    out = {}
    # "dup": processes a and b both claim rank 1 of 3 (rank 2 never comes).
    # "size": a says world 3, b says 4: c says 3.
    plan = {"dup": {"a": (1, 3), "b": (1, 3), "c": (0, 3)}, "size": {"a": (0, 3), "b": (2, 4), "c": (1, 3)}}
    for scenario, who in plan.items():
        rank, world = who[name]
        start = time.monotonic()
        try:
            pg.configure(addr, scenario, rank, world)
            out[scenario] = ("configured", None, time.monotonic() - start, "")
        except uccl.UcclError as e:
            assert pg.errored() is e
            out[scenario] = (type(e).__name__, e.peer, time.monotonic() - start, str(e))
    # The same objects then make a good group.
    rank = {"a": 0, "b": 1, "c": 2}[name]
    pg.configure(addr, "good", rank, 3)
    t = torch.full((5,), float(rank + 1))
    pg.allreduce([t], dist.AllreduceOptions()).wait()
    out["good"] = t.tolist()
    assert pg.errored() is None
    R.put(store, f"result/{name}", out)
    pg.shutdown()


def test_mismatched_configuration_is_a_typed_error():
    store = R.serve_store()
    R.run(mismatch_worker, ["a", "b", "c"], store.port, deadline_s=120)
    res = {n: R.take(store, f"result/{n}") for n in "abc"}
    print(res)
    for n in "abc":
        for scenario, peer in (("dup", 1), ("size", None)):
            kind, got_peer, elapsed, msg = res[n][scenario]
            assert kind == "InvalidArgument", f"{n} {scenario}: {kind} {msg}"
            assert elapsed < 20, f"{n} {scenario}: took {elapsed:.1f}s (the timeout is 40s)"
            if peer is not None:
                assert got_peer == peer and "rank 1 is claimed by two processes" in msg, msg
            else:
                assert "world sizes differ" in msg and got_peer in (0, 1, 2), msg
        assert res[n]["good"] == [6.0] * 5


def cycles_worker(rank, port, cycles):
    from uccl.torch import ReconfigurableProcessGroup

    store = R.client(port)
    pg = ReconfigurableProcessGroup(timeout=datetime.timedelta(seconds=30))
    out = {}
    for i in range(cycles):
        # Ranks swap every cycle: a new communicator every time, not a reused one.
        me = rank if i % 2 == 0 else 1 - rank
        pg.configure(store, f"cycle{i}", me, 2)
        t = torch.full((1000,), float(me + i))
        pg.allreduce([t], dist.AllreduceOptions()).wait()
        assert t[0].item() == 1.0 + 2 * i and pg.errored() is None
        if i == 0:
            # torch's own entry points: dist.* on the wrapper, DDP on its current plain group.
            u = torch.full((3,), float(me))
            dist.all_reduce(u, group=pg)
            assert u.tolist() == [1.0] * 3 and (pg.rank(), pg.size()) == (me, 2)
            torch.manual_seed(me)  # different initial weights: DDP broadcasts rank 0's
            ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2), process_group=pg.process_group)
            ddp(torch.full((3, 4), float(me + 1))).sum().backward()
            out["ddp"] = [p.grad.clone() for p in ddp.parameters()] + [p.detach().clone() for p in ddp.parameters()]
            del ddp
        if i == cycles // 2:
            # Rank 0 posts a receive nobody will send to, then abort() from another thread fails
            # it at once; rank 1 stays until rank 0 is done (its own abort would fail it first).
            if me == 0:
                work = pg.recv([torch.empty(3)], 1, 0)
                threading.Timer(0.3, pg.abort).start()
                start = time.monotonic()
                with pytest.raises(dist.DistBackendError, match="abort\\(\\) on rank 0"):
                    work.wait()
                out["abort_s"] = time.monotonic() - start
                del work
                store.set(f"aborted/{i}", "1")
            else:
                store.wait([f"aborted/{i}"])
        pg.abort()
        if i == 1:
            time.sleep(0.5)
            out["before"] = R.resources()  # two communicators made and gone (lazy pools exist)
    pg.shutdown()
    time.sleep(0.5)  # threads that were told to end are given a moment to be gone
    out["after"] = R.resources()
    R.put(store, f"result/{rank}", out)


def test_twenty_reconfigurations_leak_nothing():
    store = R.serve_store()
    R.run(cycles_worker, [0, 1], store.port, 20, deadline_s=180)
    ddp = [R.take(store, f"result/{r}")["ddp"] for r in (0, 1)]
    for a, b in zip(*ddp):  # gradients averaged, parameters broadcast: the same on both ranks
        assert torch.equal(a, b), (a, b)
    # The inputs were 1s on one rank and 2s on the other: the bias gradient is their mean, 3 rows.
    assert ddp[0][1].tolist() == [3.0, 3.0] and ddp[0][0].flatten().tolist() == [4.5] * 8, ddp[0]
    for r in (0, 1):
        out = R.take(store, f"result/{r}")
        print(f"rank {r}:", {k: v for k, v in out.items() if k != "ddp"})
        before, after = out["before"], out["after"]
        assert after["threads"] <= before["threads"], (before, after)
        assert after["fds"] <= before["fds"], (before, after)
        assert after["shm"] == 0 and after["mapped"] == 0, (before, after)
        if "abort_s" in out:  # failed by our abort (not earlier), and soon after it
            assert 0.25 < out["abort_s"] < 20, out["abort_s"]
    assert "abort_s" in R.take(store, "result/0") or "abort_s" in R.take(store, "result/1")


def test_errored_names_the_rank_a_cascade_started_from():
    """errored()'s peer: uccl names the peer whose connection failed; when that peer published a
    failure record of its own (it failed because of a third rank), the rank with no record is
    named instead. Checked on uccl.torch._origin over a HashStore (a real cascade cannot be
    forced on demand: it needs one survivor's progress thread to stall)."""
    from uccl.torch import _FAILED_KEY, _origin

    store = dist.HashStore()
    seen = uccl.RemoteError("all_reduce #7: rank 0 failed and closed the connection", 4, 0)
    # Rank 0 published nothing: it is the one that went away.
    assert _origin(seen, store, 4, me=1, settle_s=0.05) is seen
    # Rank 0 (and rank 2) failed and said so; rank 3 said nothing: it started the cascade.
    store.set(_FAILED_KEY.format(0), "rank 3 closed the connection")
    store.set(_FAILED_KEY.format(2), "rank 3 closed the connection")
    got = _origin(seen, store, 4, me=1, settle_s=0.05)
    assert isinstance(got, uccl.RemoteError) and got.peer == 3 and got.code == 4, got
    assert "rank 3 started it" in str(got) and "rank 0 failed" in str(got), str(got)
    # Everyone else published a record: nobody to blame beyond what uccl said.
    store.set(_FAILED_KEY.format(3), "aborted")
    assert _origin(seen, store, 4, me=1, settle_s=0.05) is seen
    # Other kinds of error are returned as they are.
    mismatch = uccl.MismatchError("all_reduce #3: counts differ", 5, 0)
    assert _origin(mismatch, store, 4, me=1) is mismatch


def test_example_torchft_style():
    """examples/torchft_style.py: a replica SIGKILLed by the launcher at an arbitrary moment, the
    others go on, a replacement joins; the example itself checks the parameters agree."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, os.path.join(root, "examples", "torchft_style.py")], capture_output=True,
                       text=True, timeout=300, cwd=os.path.dirname(root))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "replica 0: step" in out and "is gone" in out and "joins as rank 2" in out, out[-4000:]
    assert "with identical parameters" in out, out[-4000:]


def test_bad_input_and_a_world_of_one():
    """In this process: bad arguments are uccl.InvalidArgument at the call, an op before
    configure() is DistBackendError, and a world of one configures, works and reconfigures."""
    from uccl.torch import ReconfigurableProcessGroup

    pg = ReconfigurableProcessGroup(timeout=5)
    store = dist.HashStore()
    for args, what in (((store, "", 0, 1), "prefix"), (("no-port", "p", 0, 1), "host:port"),
                       ((42, "p", 0, 1), "torch Store"), ((store, "p", 2, 2), "outside a group of size 2"),
                       ((store, "p", 0, 0), "outside a group of size 0"), ((store, "p", "0", 1), "integers")):
        with pytest.raises(uccl.InvalidArgument, match=what) as e:
            pg.configure(*args)
        assert e.value.code == 1
    with pytest.raises(dist.DistBackendError, match="not configured"):
        pg.allreduce([torch.ones(2)], dist.AllreduceOptions())
    for gen in range(3):
        pg.configure(store, f"one{gen}", 0, 1)
        t = torch.arange(4.0)
        pg.allreduce([t], dist.AllreduceOptions()).wait()
        assert t.tolist() == [0.0, 1.0, 2.0, 3.0] and pg.errored() is None
        assert "one" + str(gen) in repr(pg) and pg.getBackendName() == "uccl"
    pg.shutdown()
    assert pg.process_group is None and "not configured" in repr(pg)


def test_other_uccl_version_is_refused():
    """A member running another uccl version (simulated: its registration is already on the
    store) is refused at once with InvalidArgument naming it, not met at the rendezvous."""
    from uccl.torch import ReconfigurableProcessGroup

    store = dist.HashStore()
    store.set("v1/uccl/torch/size", "2:0:0.0.1")  # "size:rank:version" of a rank 0 on uccl 0.0.1
    pg = ReconfigurableProcessGroup(timeout=30)
    start = time.monotonic()
    with pytest.raises(uccl.InvalidArgument, match=r"uccl versions differ: .* rank 0 runs uccl 0\.0\.1") as e:
        pg.configure(store, "v1", 1, 2)
    assert e.value.peer == 0 and pg.errored() is e.value and time.monotonic() - start < 20
    # Everyone else waiting on that prefix reads the same verdict.
    assert b"uccl versions differ" in store.get("v1/uccl/torch/bad")
    pg.shutdown()
