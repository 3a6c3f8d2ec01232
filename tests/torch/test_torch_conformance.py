"""Conformance fixes found by PyTorch's own distributed tests (issue 15, item 6):

* all_gather_coalesced takes torch's layout: output_tensor_lists[r][i] receives input i of
  rank r (one list per rank, each as long as the inputs), checked against gloo at world 3;
* DDP's logging data names the backend "uccl", as dist.get_backend() does;
* all_reduce of sparse COO tensors (Gloo's semantics: SUM, the coalesced sum on every rank),
  bitwise equal to gloo's, and DDP training an nn.Embedding(sparse=True) as under gloo;
* dist.recv / dist.irecv without a source: the first message from any rank with the tag wins,
  recv returns the sender, per-peer order holds, a receive with a source keeps working, a
  rank that dies fails the receive at once and a silent group ends at the group's timeout.
* a result written into a leaf tensor that requires grad (pipelining's receive buffers, a
  parameter broadcast) is written below autograd, as Gloo does: a non-contiguous one, which uccl
  fills through a host copy, raised "a leaf Variable that requires grad is being used in an
  in-place operation" (found running torch.distributed.pipelining on a non-CUDA accelerator).
* TORCH_DISTRIBUTED_DEBUG=DETAIL: torch's ProcessGroupWrapper around uccl checks each
  collective's fingerprint and names a mismatch.
The all_gather_coalesced, any-source and sparse scenarios run on the default group and on uccl
groups pinned to tcp and to shm."""
import pytest
import uccl

if not uccl.build_info().get("torch"):  # the build says so; never guess from imports
    pytest.skip("uccl built without the torch backend", allow_module_level=True)

import datetime
import math
import os
import time

import torch
import torch.distributed as dist

import torch_dist_util as U


def check_all_gather_coalesced(rank, world, u, g):
    shapes = [(2, 2), (1,), (3,), (0,)]
    for dtype in (torch.float32, torch.int64, torch.complex64, torch.bool):
        ins = [U.make_input(rank, math.prod(s), dtype, salt=i).reshape(s) for i, s in enumerate(shapes)]
        outs = [[torch.zeros(s, dtype=dtype) for s in shapes] for _ in range(world)]
        ref = [[torch.zeros(s, dtype=dtype) for s in shapes] for _ in range(world)]
        dist.all_gather_coalesced(outs, ins, group=u)
        if dtype != torch.bool:  # gloo has no bool all_gather_coalesced
            dist.all_gather_coalesced(ref, ins, group=g)
        for r in range(world):
            for i, s in enumerate(shapes):
                want = U.make_input(r, math.prod(s), dtype, salt=i).reshape(s)
                U.assert_same(outs[r][i], want, f"all_gather_coalesced {dtype} input {i} from rank {r} (rank {rank})")
                if dtype != torch.bool:
                    U.assert_same(outs[r][i], ref[r][i], f"all_gather_coalesced vs gloo {dtype} [{r}][{i}]")
    # Non-contiguous outputs, async with a future.
    ins = [U.make_input(rank, 12, torch.float32).reshape(3, 4), U.make_input(rank, 2, torch.float32, salt=1)]
    outs = [[torch.empty(4, 3).t(), torch.empty(2)] for _ in range(world)]
    fut = dist.all_gather_coalesced(outs, ins, group=u, async_op=True)
    fut.wait()
    for r in range(world):
        U.assert_same(outs[r][0], U.make_input(r, 12, torch.float32).reshape(3, 4), f"non-contiguous from {r}")
        U.assert_same(outs[r][1], U.make_input(r, 2, torch.float32, salt=1), f"second input from {r}")
    # The old misreading (one list per input) is refused with a message that says the layout.
    if world != 2:
        with pytest.raises(ValueError, match=r"2 output lists but the group has \d+ ranks"):
            dist.all_gather_coalesced([[torch.empty(2) for _ in range(world)] for _ in range(2)],
                                      [torch.ones(2), torch.ones(2)], group=u)
    with pytest.raises(ValueError, match=r"output_tensor_lists\[0\] has 1 tensors but there are 2 inputs"):
        dist.all_gather_coalesced([[torch.empty(2)] for _ in range(world)], [torch.ones(2), torch.ones(2)], group=u)
    t = torch.ones(1)
    dist.all_reduce(t, group=u)  # the group is still usable after the refusals
    assert t.item() == world


def check_recv_any_source(rank, world, u, g):
    if world < 3:
        return
    me = dist.get_rank(u)
    glob = [dist.get_global_rank(u, r) for r in range(world)]
    # 1. Every other rank sends to rank 0; rank 0 takes them in whatever order they come.
    if me == 0:
        seen = []
        for _ in range(world - 1):
            t = torch.empty(5, dtype=torch.float64)
            src = dist.recv(t, group=u)  # no src: any rank; returns the sender's global rank
            assert src in glob[1:], (src, glob)
            gsrc = glob.index(src)
            U.assert_same(t, U.make_input(gsrc, 5, torch.float64), f"recv any from {gsrc}")
            seen.append(gsrc)
        assert sorted(seen) == list(range(1, world)), seen
    else:
        dist.send(U.make_input(me, 5, torch.float64), group_dst=0, group=u)
    # 2. Tags select, per-peer order holds: rank 1's two tag-7 messages are sent first (gloo
    # barrier), yet the tag-3 receive takes rank 2's; then the tag-7 ones in order, an async
    # any-source irecv (non-contiguous, tag 9), and a receive with a source.
    if me == 1:
        dist.send(torch.full((4,), 71.0), group_dst=0, group=u, tag=7)
        dist.send(torch.full((4,), 72.0), group_dst=0, group=u, tag=7)
    dist.barrier(group=g)
    if me == 2:
        dist.send(torch.full((4,), 31.0), group_dst=0, group=u, tag=3)
        dist.send(torch.arange(12.0).reshape(3, 4), group_dst=0, group=u, tag=9)
    if me == 1:
        dist.send(torch.full((2,), 5.0), group_dst=0, group=u, tag=0)
    if me == 0:
        t = torch.empty(4)
        assert dist.recv(t, group=u, tag=3) == glob[2]
        assert t.tolist() == [31.0] * 4
        assert dist.recv(t, group=u, tag=7) == glob[1]
        assert t.tolist() == [71.0] * 4
        assert dist.recv(t, group=u, tag=7) == glob[1]
        assert t.tolist() == [72.0] * 4
        nc = torch.empty(4, 3).t()
        work = dist.irecv(nc, group=u, tag=9)  # no src
        work.wait()
        assert work._source_rank() == 2, work._source_rank()  # the group rank, as with gloo
        U.assert_same(nc, torch.arange(12.0).reshape(3, 4), "irecv any non-contiguous")
        t2 = torch.empty(2)
        dist.recv(t2, group_src=1, group=u)  # a receive with a source after any-source ones
        assert t2.tolist() == [5.0, 5.0]
    # 3. Collectives still line up afterwards.
    t = torch.ones(3)
    dist.all_reduce(t, group=u)
    assert t.tolist() == [world] * 3
    # An any-source receive cannot join a batch (uccl picks its peer when it runs).
    if me == 0:
        cpu = torch.device("cpu")
        u._start_coalescing(cpu)
        try:
            with pytest.raises(NotImplementedError, match="any source cannot be part of a batch"):
                u.recv_anysource([torch.empty(1)], 0)
        finally:
            u._end_coalescing(cpu)


def sparse_input(rank, dtype, dense=(3,)):
    """Uneven nnz (rank 1 has none), repeated indices (not coalesced), dense trailing dims."""
    n = [5, 0, 3, 7, 2][rank % 5]
    gen = torch.Generator().manual_seed(100 + rank)
    idx = torch.randint(0, 4, (2, n), generator=gen)
    val = (torch.randn(n, *dense, generator=gen) * 10).to(dtype)
    return torch.sparse_coo_tensor(idx, val, (4, 4, *dense))


def check_sparse_all_reduce(rank, world, u, g):
    for dtype in (torch.float32, torch.float64, torch.int64):
        t, ref = sparse_input(rank, dtype), sparse_input(rank, dtype)
        dist.all_reduce(t, group=u)
        dist.all_reduce(ref, group=g)
        assert t.is_sparse and t.is_coalesced()
        U.assert_same(t.to_dense(), ref.to_dense(), f"sparse all_reduce {dtype} vs gloo (rank {rank})")
        want = sum(sparse_input(r, dtype).to_dense() for r in range(world))
        assert torch.allclose(t.to_dense(), want), f"sparse all_reduce {dtype} (rank {rank})"
    # No entries anywhere; a 1-d tensor without dense dims; async with a future.
    t = torch.sparse_coo_tensor(torch.empty(1, 0, dtype=torch.long), torch.empty(0), (9,))
    dist.all_reduce(t, group=u)
    assert t._nnz() == 0 and t.shape == (9,)
    t = torch.sparse_coo_tensor(torch.tensor([[rank % 3]]), torch.tensor([float(rank + 1)]), (3,))
    fut = dist.all_reduce(t, group=u, async_op=True).get_future()
    out = fut.wait()[0]
    want = torch.zeros(3)
    for r in range(world):
        want[r % 3] += r + 1
    U.assert_same(out.to_dense(), want, "async sparse all_reduce")
    U.assert_same(t.to_dense(), want, "async sparse all_reduce, in place")
    with pytest.raises(ValueError, match="sparse tensors reduce with ReduceOp.SUM only"):
        dist.all_reduce(sparse_input(rank, torch.float32), op=dist.ReduceOp.MAX, group=u)
    # Another shape on one rank: its indices would fall outside the others' tensors. Every rank
    # refuses, naming rank 0, and the group stays usable.
    t = sparse_input(rank, torch.float32, dense=(3,) if dist.get_rank(u) else (2,))
    with pytest.raises(ValueError, match=r"rank 0's sparse tensor differs from this rank's|rank 1's sparse tensor"):
        dist.all_reduce(t, group=u)
    t = torch.ones(2)
    dist.all_reduce(t, group=u)
    assert t[0].item() == world


def check_ddp_sparse_gradients(rank, world, g):
    """DDP over an nn.Embedding(sparse=True): its gradients are sparse and DDP all_reduces them
    as such; two steps of SGD end with the weights gloo's DDP ends with."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    weights = []
    for pg in (None, g):
        torch.manual_seed(0)
        model = DDP(torch.nn.Embedding(10, 3, sparse=True), process_group=pg)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        for step in range(2):
            ids = torch.tensor([(rank + step) % 10, (3 * rank + 1) % 10, 7])
            opt.zero_grad()
            model(ids).pow(2).sum().backward()
            assert model.module.weight.grad.is_sparse
            opt.step()
        weights.append(model.module.weight.detach().clone())
    assert torch.allclose(weights[0], weights[1]), (weights[0] - weights[1]).abs().max()


def check_ddp_backend_name(rank, world, g):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(torch.nn.Linear(4, 2))
    data = model._get_ddp_logging_data()
    assert data["backend_name"] == dist.get_backend() == "uccl", data.get("backend_name")
    model(torch.ones(3, 4)).sum().backward()  # and it trains
    other = DDP(torch.nn.Linear(4, 2), process_group=g)  # a gloo group keeps its own name
    assert other._get_ddp_logging_data()["backend_name"] == "gloo"


def leaf(shape, value, contiguous):
    """A leaf that requires grad, filled with `value`; non-contiguous (a transposed layout) or not."""
    t = torch.empty(shape, requires_grad=True) if contiguous else \
        torch.empty_strided(shape, (1, shape[0]), requires_grad=True)
    with torch.no_grad():
        t.fill_(value)
    assert t.is_leaf and t.requires_grad and t.is_contiguous() == contiguous
    return t


def check_leaf_outputs_that_require_grad(rank, world, u, g):
    for contiguous in (True, False):
        what = "contiguous" if contiguous else "non-contiguous"
        a, ref = leaf((4, 3), rank + 1.0, contiguous), leaf((4, 3), rank + 1.0, contiguous)
        dist.all_reduce(a, group=u)
        dist.all_reduce(ref, group=g)
        assert torch.equal(a.detach(), ref.detach()), (what, a, ref)
        assert a.is_leaf and a.requires_grad and a.grad_fn is None, what
        b = leaf((4, 3), rank + 1.0, contiguous)
        dist.broadcast(b, 1, group=u)
        assert b.detach().eq(2.0).all(), (what, b)
        # A receive (gloo cannot receive into a non-contiguous tensor; uccl can).
        r = leaf((4, 3), -1.0, contiguous)
        peer = (rank + 1) % world
        ops = [dist.P2POp(dist.isend, torch.full((4, 3), float(rank)), peer, group=u),
               dist.P2POp(dist.irecv, r, (rank - 1) % world, group=u)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        assert r.detach().eq(float((rank - 1) % world)).all(), (what, r)
        # all_gather into leaves; the result then takes part in autograd as any leaf does
        outs = [leaf((4, 3), 0.0, contiguous) for _ in range(world)]
        dist.all_gather(outs, torch.full((4, 3), float(rank)), group=u)
        for i, o in enumerate(outs):
            assert o.detach().eq(float(i)).all(), (what, i, o)
        sum(o.sum() for o in outs).backward()
        assert all(o.grad is not None and o.grad.eq(1).all() for o in outs), what


def conformance_worker(rank, world, port):
    U.init_uccl(rank, world, port)
    g = dist.new_group(backend="gloo")
    groups = [(dist.group.WORLD, "default group")]
    for transport in ("tcp", "shm"):
        u = dist.new_group(backend="uccl", pg_options=uccl.ProcessGroupOptions(transport=transport))
        groups.append((u, f"transport {transport}"))
    for u, label in groups:
        for check in (check_all_gather_coalesced, check_recv_any_source, check_sparse_all_reduce,
                      check_leaf_outputs_that_require_grad):
            try:
                check(rank, world, u, g)
            except Exception as e:
                raise AssertionError(f"{check.__name__} on {label} (rank {rank} of {world}) failed: {e}") from e
        dist.barrier(group=g)
    check_ddp_backend_name(rank, world, g)
    check_ddp_sparse_gradients(rank, world, g)
    dist.barrier(group=g)
    dist.destroy_process_group()


def test_conformance_world_3():
    U.spawn(conformance_worker, 3, deadline_s=240)


def any_source_failures_worker(rank, world, port):
    U.init_uccl(rank, world, port, timeout_s=60)
    g = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=60))
    # Nobody sends: the group's timeout (3 s) ends the receive and says what it waited for.
    u3 = dist.new_group(backend="uccl", pg_options=uccl.ProcessGroupOptions(timeout=3))
    # Connected first: an idle rank does not answer a connection handshake (nothing drives its
    # communicator), so a dial to a rank that stays out of uccl ends at the same deadline with
    # "did not answer the connection handshake" instead.
    dist.all_reduce(torch.ones(1), group=u3)
    dist.barrier(group=u3)
    if rank == 0:
        start = time.monotonic()
        with pytest.raises(dist.DistBackendError, match=r"any rank \(tag 6"):
            dist.recv(torch.empty(2), group=u3, tag=6)
        assert time.monotonic() - start < 20
    dist.barrier(group=g)
    # A rank that dies fails a pending any-source receive at once, naming it; the rank that
    # would never send stays alive meanwhile.
    dist.barrier()  # uccl connections up
    if rank == 2:
        dist.barrier(group=g)
        os._exit(0)
    if rank == 1:
        dist.barrier(group=g)
        time.sleep(8)
        os._exit(0)
    dist.barrier(group=g)
    start = time.monotonic()
    with pytest.raises(dist.DistBackendError, match="rank 2"):
        dist.recv(torch.empty(2))
    assert time.monotonic() - start < 6, time.monotonic() - start
    os._exit(0)


def test_any_source_timeout_and_dead_peer():
    U.spawn(any_source_failures_worker, 3, deadline_s=120)


def debug_detail_worker(rank, world, port):
    # TORCH_DISTRIBUTED_DEBUG=DETAIL: torch wraps every backend, plugins included, in a
    # ProcessGroupWrapper that checks each collective's fingerprint over a helper gloo group
    # before the collective runs, and names the ranks that disagree.
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    dist.set_debug_level_from_env()
    U.init_uccl(rank, world, port)
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert type(backend).__name__ == "_ProcessGroupWrapper", type(backend)
    t = torch.full((4,), float(rank))
    dist.all_reduce(t)
    U.assert_same(t, torch.full((4,), float(sum(range(world)))), "all_reduce under DETAIL")
    outs = [torch.zeros(4) for _ in range(world)]
    dist.all_gather(outs, t)
    dist.barrier()
    # Rank 0 reduces 3 elements, the others 4: the wrapper refuses before uccl sees the call.
    with pytest.raises(RuntimeError, match="Detected mismatch between collectives on ranks"):
        dist.all_reduce(torch.ones(3 if rank == 0 else 4))
    dist.destroy_process_group()


def test_torch_distributed_debug_detail():
    U.spawn(debug_detail_worker, 2, deadline_s=120)
