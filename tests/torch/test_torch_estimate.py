"""torch.distributed._time_estimator on uccl groups (NCCL's alone in torch; inductor's overlap
scheduling asks it): inside the block nothing runs and every op completes at once, the caller's
tensors stay as they were (non-contiguous outputs too), and the estimate is what uccl predicts
for the ops (uccl::Estimator) - the same ops twice take twice as long, more bytes take longer, a
rank estimating alone needs nobody; afterwards the group runs as before."""
import pytest
import uccl

if not uccl.build_info().get("torch"):  # the build says so; never guess from imports
    pytest.skip("uccl built without the torch backend", allow_module_level=True)

import datetime
import math
import time

import torch
import torch.distributed as dist

import torch_dist_util as U


def estimate(fn):
    with dist._time_estimator(device=torch.device("cpu")) as cm:
        fn()
    return cm.estimated_time


def estimate_worker(rank, world, port):
    U.init_uccl(rank, world, port)
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert backend.supports_time_estimate

    t = torch.full((1 << 18,), float(rank + 1))  # 1 MiB
    one = estimate(lambda: dist.all_reduce(t))
    assert one > 0 and bool((t == rank + 1).all()), (one, t[:4])
    two = estimate(lambda: (dist.all_reduce(t), dist.all_reduce(t)))
    assert math.isclose(two, 2 * one, rel_tol=1e-9), (one, two)
    big = torch.zeros(1 << 22)  # 16 MiB
    assert estimate(lambda: dist.all_reduce(big)) > one

    # Every kind of op completes inside the block without touching the outputs.
    outs = [torch.full((4, 8), -1.0)[:, ::2] for _ in range(world)]  # non-contiguous: staged
    flat = torch.full((world * 16,), -1.0)
    rs_out = torch.full((16,), -1.0)
    a2a = torch.full((world * 4,), -1.0)
    sparse = torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (4,))

    def many():
        works = [
            dist.all_gather(outs, torch.ones(4, 4), async_op=True),
            dist.all_gather_into_tensor(flat, torch.ones(16), async_op=True),
            dist.reduce_scatter_tensor(rs_out, torch.ones(world * 16), async_op=True),
            dist.all_to_all_single(a2a, torch.ones(world * 4), async_op=True),
            dist.broadcast(t, src=1, async_op=True),
            dist.barrier(async_op=True),
        ]
        dist.all_reduce(sparse)
        peer = 1 - rank
        works += dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.ones(8), peer),
                                         dist.P2POp(dist.irecv, torch.zeros(8), peer)])
        for w in works:
            assert w.wait(timeout=datetime.timedelta(seconds=5)) and w.is_completed()

    assert estimate(many) > 0
    assert all(bool((o == -1).all()) for o in outs) and bool((flat == -1).all())
    assert bool((rs_out == -1).all()) and bool((a2a == -1).all()) and bool((t == rank + 1).all())

    with pytest.raises(RuntimeError, match="twice"):
        with dist._time_estimator(device=torch.device("cpu")):
            backend._start_time_estimate()
    backend._end_time_estimate()

    # A rank estimating alone asks nobody: rank 1 is not in any collective meanwhile.
    dist.barrier()
    if rank == 0:
        start = time.monotonic()
        assert estimate(lambda: [dist.all_reduce(t) for _ in range(50)]) > 0
        assert time.monotonic() - start < 10
    dist.barrier()
    # The group runs as before (the estimated ops sent nothing).
    dist.all_reduce(t)
    assert bool((t == sum(range(1, world + 1))).all()), t[:4]
    dist.destroy_process_group()


def test_time_estimator():
    U.spawn(estimate_worker, 2)
