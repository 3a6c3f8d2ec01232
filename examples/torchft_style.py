"""Fault-tolerant data-parallel training the torchft way, over uccl.

    python examples/torchft_style.py      # 3 replicas; one is killed (SIGKILL) mid-training,
                                          # the others go on; a replacement joins; all agree

This process is the launcher: it serves the rendezvous store (torchft's lighthouse/manager role;
never a replica, since a replica may die), starts the replicas, kills one of them at an arbitrary
moment, starts a replacement, and checks that every replica ends with the same parameters.

Each replica trains with a gradient all_reduce on a uccl.torch.ReconfigurableProcessGroup:
  * a failure: the all_reduce raises DistBackendError; ``pg.errored()`` is a uccl.RemoteError
    whose ``.peer`` names the rank that died. The survivors agree on the new membership through
    the store (the first proposal wins: compare_set), configure a group over a new prefix with
    their new ranks, and rank 0 broadcasts its state (step and parameters), so a replica that
    finished the interrupted step and one that did not agree again;
  * a join: the replacement asks through the store; rank 0 sees the request at a step boundary
    and every member learns of it from the same all_reduce (one extra slot), so all of them
    grow the group at the same step; the newcomer gets the state by the same broadcast.
"""
import datetime
import json
import multiprocessing as mp
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

STEPS = 30
TIMEOUT = datetime.timedelta(seconds=30)


def model_and_batches():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def batch(step, replica):
        g = torch.Generator().manual_seed(1000 * step + replica)
        x = torch.randn(32, 8, generator=g)
        return x, x.sum(dim=1, keepdim=True).cos()

    return model, batch


def state_of(model, step):
    return torch.cat([torch.tensor([float(step)])] + [p.detach().reshape(-1) for p in model.parameters()])


def load_state(model, state):
    off = 1
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(state[off:off + p.numel()].view_as(p))
            off += p.numel()
    return int(state[0].item())


def replica(replica_id, port):
    import uccl
    from uccl.torch import ReconfigurableProcessGroup

    store = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False, timeout=TIMEOUT)
    model, batch = model_and_batches()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    pg = ReconfigurableProcessGroup(timeout=TIMEOUT)

    def configure(gen, members, step):
        pg.configure(store, f"gen{gen}", members.index(replica_id), len(members))
        state = state_of(model, step)
        pg.broadcast([state], dist.BroadcastOptions()).wait()  # rank 0's state wins
        return load_state(model, state)

    if replica_id < 3:
        gen, members = 0, [0, 1, 2]
    else:  # the replacement: ask, then wait for the members to take it in
        store.set("join/request", str(replica_id))
        gen, members = json.loads(store.get("join/answer"))
    step = configure(gen, members, 0)
    while step < STEPS or len(members) < 3:
        me = members.index(replica_id)
        join = 1.0 if me == 0 and len(members) < 3 and store.check(["join/request"]) else 0.0
        model.zero_grad()
        x, y = batch(step, replica_id)
        torch.nn.functional.mse_loss(model(x), y).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()] + [torch.tensor([join])])
        try:
            pg.allreduce([flat], dist.AllreduceOptions()).wait()
        except dist.DistBackendError:
            err = pg.errored()
            assert isinstance(err, uccl.RemoteError), err
            print(f"replica {replica_id}: step {step} failed: rank {err.peer} "
                  f"(replica {members[err.peer]}) is gone", flush=True)
            proposal = json.dumps([m for m in members if m != members[err.peer]])
            members = json.loads(store.compare_set(f"members/{gen + 1}", "", proposal))
            if replica_id not in members:
                sys.exit(f"replica {replica_id} was declared dead by the others")
            gen += 1
            step = configure(gen, members, step)
            continue
        off = 0
        for p in model.parameters():
            p.grad.copy_(flat[off:off + p.numel()].view_as(p) / len(members))
            off += p.numel()
        opt.step()
        step += 1
        if me == 0:
            store.set("progress", str(step))
        if flat[-1] > 0:  # grow at this step boundary
            members = members + [int(store.get("join/request"))]
            gen += 1
            if me == 0:
                store.set("join/answer", json.dumps([gen, members]))
            print(f"replica {replica_id}: step {step}: replica {members[-1]} joins as rank {len(members) - 1}",
                  flush=True)
            step = configure(gen, members, step)
        time.sleep(0.02)
    pg.barrier(dist.BarrierOptions()).wait()
    store.set(f"result/{replica_id}", json.dumps(state_of(model, step).tolist()))
    pg.shutdown()


def main():
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    ctx = mp.get_context("spawn")
    procs = {r: ctx.Process(target=replica, args=(r, store.port)) for r in range(3)}
    for p in procs.values():
        p.start()
    deadline = time.monotonic() + 240
    while not store.check(["progress"]) or int(store.get("progress")) < 5:
        assert time.monotonic() < deadline, "the replicas did not reach step 5"
        time.sleep(0.01)
    os.kill(procs[2].pid, signal.SIGKILL)  # wherever it is: mid-step, mid-all_reduce...
    print(f"launcher: killed replica 2 near step {int(store.get('progress'))}", flush=True)
    procs[3] = ctx.Process(target=replica, args=(3, store.port))
    procs[3].start()
    for p in procs.values():
        p.join(max(1.0, deadline - time.monotonic()))
    codes = {r: p.exitcode for r, p in procs.items()}
    for p in procs.values():
        if p.is_alive():
            p.kill()
    assert codes[2] == -signal.SIGKILL and all(codes[r] == 0 for r in (0, 1, 3)), f"exit codes: {codes}"
    results = {r: json.loads(store.get(f"result/{r}")) for r in (0, 1, 3)}
    assert results[0] == results[1] == results[3], "the replicas' parameters differ"
    print(f"launcher: replicas 0, 1 and 3 finished at step {int(results[0][0])} with identical parameters")


if __name__ == "__main__":
    main()
