"""Actor and scenario bodies for tests/test_ray.py (imported by the Ray workers through
PYTHONPATH, so they are pickled by reference)."""
import os
import time

import numpy as np
import ray

OPS = {"SUM": (np.sum, "SUM"), "PRODUCT": (np.prod, "PRODUCT"), "MIN": (np.min, "MIN"), "MAX": (np.max, "MAX")}


def data(rank, n=10, dtype=np.float32, salt=0):
    """Rank-specific values that keep products and sums exact in float32."""
    return ((np.arange(n) + rank + salt) % 3 + 1).astype(dtype)


@ray.remote(num_cpus=0, max_restarts=0)
class Worker:
    def __init__(self, rank):
        import uccl.ray  # noqa: F401  (registers backend "uccl" in this process)
        self.rank = rank

    def pid(self):
        return os.getpid()

    def init_group(self, world, rank, name):
        from ray.util import collective as col
        col.init_collective_group(world, rank, backend="uccl", group_name=name)
        return col.get_rank(name)

    def call(self, fn, *args):
        return fn(self, *args)


def every_collective(actor, group, torch_tensors):
    """Every BaseGroup call through ray.util.collective; returns the results for the driver."""
    from ray.util import collective as col
    from ray.util.collective.types import ReduceOp
    conv = (lambda a: __import__("torch").from_numpy(a)) if torch_tensors else (lambda a: a)
    back = (lambda t: t.numpy()) if torch_tensors else (lambda a: a)
    col.barrier(group_name=group)  # a group made by create_collective_group is built on first use
    world, rank = col.get_collective_group_size(group), col.get_rank(group)
    out = {}
    for name in OPS:
        x = conv(data(rank))
        col.allreduce(x, group_name=group, op=getattr(ReduceOp, name))
        out[f"allreduce_{name}"] = back(x).copy()
    x = conv(data(rank))
    col.reduce(x, dst_rank=1, group_name=group, op=ReduceOp.MAX)
    out["reduce"] = back(x).copy()
    x = conv(data(rank) * (rank == 2))
    col.broadcast(x, src_rank=2, group_name=group)
    out["broadcast"] = back(x).copy()
    outs = [conv(np.zeros((2, 5), np.float32)) for _ in range(world)]
    col.allgather(outs, conv(data(rank).reshape(2, 5)), group_name=group)
    out["allgather"] = np.stack([back(o) for o in outs])
    y = conv(np.zeros(10, np.float32))
    col.reducescatter(y, [conv(data(rank, salt=i)) for i in range(world)], group_name=group)
    out["reducescatter"] = back(y).copy()
    # A ring of send/recv: even ranks send first, odd ranks receive first.
    r = conv(np.zeros(10, np.float32))
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    if rank % 2 == 0:
        col.send(conv(data(rank)), nxt, group_name=group)
        col.recv(r, prv, group_name=group)
    else:
        col.recv(r, prv, group_name=group)
        col.send(conv(data(rank)), nxt, group_name=group)
    out["recv"] = back(r).copy()
    col.barrier(group_name=group)
    return out


def all_reduce_loop(actor, group, iters, salt):
    from ray.util import collective as col
    rank = col.get_rank(group)
    for _ in range(iters):
        x = data(rank, 1000, salt=salt)
        col.allreduce(x, group_name=group)
    return x


def all_reduce_caught(actor, group):
    """One allreduce; returns the uccl error instead of raising (so its type and peer arrive)."""
    from ray.util import collective as col
    import uccl
    x = np.ones(1 << 16, np.float32)
    start = time.monotonic()
    try:
        col.allreduce(x, group_name=group)
    except uccl.UcclError as e:
        return {"type": type(e).__name__, "peer": e.peer, "message": str(e), "seconds": time.monotonic() - start}
    return {"type": None}


def sleep_forever(actor):
    time.sleep(3600)


@ray.remote(num_cpus=0, max_restarts=0)
class GraphWorker:
    """A compiled-graph actor: returns a rank-specific torch tensor for the collectives."""

    def __init__(self, rank):
        import uccl.ray  # noqa: F401
        self.rank = rank

    def make(self, n):
        import torch
        return torch.from_numpy(data(self.rank, n))

    def transport_of(self, _):
        import uccl.ray
        return "ok"

    def echo(self, t):
        return t
