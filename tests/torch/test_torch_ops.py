"""Every op of the uccl backend against gloo (or an exact local expectation where gloo cannot),
world sizes 1-5, counts 0/1/7/13, many dtypes, uneven sizes, non-contiguous tensors.

One spawn of 5 ranks runs every check on groups of 5, 1, 2, 3 and 4 ranks (process start-up
dominates on 2 cores); each assertion names the op, dtype, count, group and rank."""
import pytest
import uccl

if not uccl.build_info().get("torch"):  # the build says so; never guess from imports
    pytest.skip("uccl built without the torch backend", allow_module_level=True)

import torch
import torch.distributed as dist

import torch_dist_util as U

COUNTS = [0, 1, 7, 13]
REDUCE_DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.int8, torch.uint8,
                 torch.float16, torch.bfloat16]
MOVE_DTYPES = [torch.float32, torch.int64, torch.bool, torch.int16, torch.complex128, torch.bfloat16]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]




def check_all_reduce(rank, world, u, g):
    for dtype in REDUCE_DTYPES:
        for n in COUNTS:
            for op in OPS:
                x = U.make_input(rank, n, dtype)
                a, b = x.clone(), x.clone()
                dist.all_reduce(a, op=op, group=u)
                dist.all_reduce(b, op=op, group=g)
                U.assert_same(a, b, f"all_reduce {op} {dtype} n={n} rank={rank}")
    for dtype in [torch.float32, torch.float64, torch.bfloat16]:
        x = U.make_input(rank, 13, dtype)
        a, b = x.clone(), x.clone()
        dist.all_reduce(a, op=dist.ReduceOp.AVG, group=u)
        dist.all_reduce(b, op=dist.ReduceOp.SUM, group=g)
        U.assert_same(a, b / world, f"all_reduce AVG {dtype} rank={rank}")
        for factor in (0.5, torch.tensor([0.25], dtype=dtype)):
            a, b = x.clone(), x.clone() * factor
            dist.all_reduce(a, op=dist._make_nccl_premul_sum(factor), group=u)
            dist.all_reduce(b, op=dist.ReduceOp.SUM, group=g)
            U.assert_same(a, b, f"all_reduce PREMUL_SUM({factor}) {dtype} rank={rank}")
    # bool: SUM/MAX are "any", PRODUCT/MIN are "all" (gloo agrees); complex: sum on the real view.
    for op in OPS + [dist.ReduceOp.BOR, dist.ReduceOp.BAND]:
        x = U.make_input(rank, 7, torch.bool)
        a, b = x.clone(), x.clone()
        dist.all_reduce(a, op=op, group=u)
        dist.all_reduce(b, op=op, group=g)
        U.assert_same(a, b, f"all_reduce {op} bool rank={rank}")
    x = U.make_input(rank, 7, torch.complex64)
    a, b = x.clone(), x.clone()
    dist.all_reduce(a, group=u)
    dist.all_reduce(b, group=g)
    U.assert_same(a, b, f"all_reduce complex64 rank={rank}")
    # Non-contiguous: a transposed view is reduced through a staging copy and written back.
    base = U.make_input(rank, 4 * 5, torch.float32).reshape(4, 5)
    a, b = base.clone().t(), base.clone().t()
    dist.all_reduce(a, group=u)
    dist.all_reduce(b, group=g)
    U.assert_same(a, b, f"all_reduce non-contiguous rank={rank}")
    # Async + future: the future's value is the reduced tensor itself.
    x = U.make_input(rank, 7, torch.float32)
    a, b = x.clone(), x.clone()
    fut = dist.all_reduce(a, async_op=True, group=u).get_future()
    dist.all_reduce(b, group=g)
    U.assert_same(fut.wait()[0], b, f"all_reduce future value rank={rank}")
    U.assert_same(a, b, f"all_reduce async rank={rank}")


def check_all_reduce_coalesced(rank, world, u, g):
    xs = [U.make_input(rank, n, torch.float32, salt=i) for i, n in enumerate([3, 0, 13])]
    xs.append(U.make_input(rank, 5, torch.int64))
    a, b = [x.clone() for x in xs], [x.clone() for x in xs]
    with dist._coalescing_manager(group=u, async_ops=True) as cm:
        for t in a:
            dist.all_reduce(t, group=u)
    cm.wait()
    for t in b:
        dist.all_reduce(t, group=g)
    for i, (x, y) in enumerate(zip(a, b)):
        U.assert_same(x, y, f"all_reduce_coalesced tensor {i} rank={rank}")


def check_broadcast(rank, world, u, g):
    for root in range(world):
        for dtype in MOVE_DTYPES:
            for n in COUNTS:
                x = U.make_input(rank, n, dtype)
                dist.broadcast(x, group_src=root, group=u)
                U.assert_same(x, U.make_input(root, n, dtype), f"broadcast root={root} {dtype} n={n} rank={rank}")
        base = U.make_input(rank, 12, torch.float32).reshape(3, 4)
        x = base.clone().t()
        dist.broadcast(x, group_src=root, group=u)
        U.assert_same(x, U.make_input(root, 12, torch.float32).reshape(3, 4).t(), f"broadcast non-contig rank={rank}")


def check_reduce(rank, world, u, g):
    for root in range(world):
        for dtype in [torch.float32, torch.int64, torch.bfloat16]:
            for op in OPS:
                x = U.make_input(rank, 7, dtype)
                a, b = x.clone(), x.clone()
                dist.reduce(a, group_dst=root, op=op, group=u)
                dist.reduce(b, group_dst=root, op=op, group=g)
                if rank == root:
                    U.assert_same(a, b, f"reduce root={root} {op} {dtype} rank={rank}")


def check_all_gather(rank, world, u, g):
    for dtype in MOVE_DTYPES:
        for n in COUNTS:
            x = U.make_input(rank, n, dtype)
            outs = [torch.empty(n, dtype=dtype) for _ in range(world)]
            dist.all_gather(outs, x, group=u)
            for r in range(world):
                U.assert_same(outs[r], U.make_input(r, n, dtype), f"all_gather {dtype} n={n} from {r} rank={rank}")
    # Uneven sizes (NCCL allows them, gloo refuses): rank r contributes r+1 elements.
    x = U.make_input(rank, rank + 1, torch.float32)
    outs = [torch.empty(r + 1) for r in range(world)]
    dist.all_gather(outs, x, group=u)
    for r in range(world):
        U.assert_same(outs[r], U.make_input(r, r + 1, torch.float32), f"all_gather uneven from {r} rank={rank}")
    # Non-contiguous outputs.
    outs = [torch.empty(4, 3).t() for _ in range(world)]
    dist.all_gather(outs, U.make_input(rank, 12, torch.float32).reshape(3, 4), group=u)
    for r in range(world):
        U.assert_same(outs[r], U.make_input(r, 12, torch.float32).reshape(3, 4), f"all_gather non-contig rank={rank}")
    # Deprecated list-of-lists form (still reachable): outs[r][i] receives input i of rank r
    # (torch's layout; test_torch_conformance.py checks it against gloo).
    ins = [U.make_input(rank, n, torch.float32, salt=n) for n in (2, 5)]
    outs = [[torch.empty(n) for n in (2, 5)] for _ in range(world)]
    dist.all_gather_coalesced(outs, ins, group=u)
    for r in range(world):
        for i, n in enumerate((2, 5)):
            U.assert_same(outs[r][i], U.make_input(r, n, torch.float32, salt=n), f"all_gather_coalesced n={n} from {r}")
    # all_gather_object rides on uccl all_gather with uneven pickles.
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "pad": "x" * rank}, group=u)
    assert objs == [{"rank": r, "pad": "x" * r} for r in range(world)], objs


def check_all_gather_into_tensor(rank, world, u, g):
    for dtype in MOVE_DTYPES + [torch.float16]:
        for n in COUNTS:
            x = U.make_input(rank, n, dtype)
            a = torch.empty(world * n, dtype=dtype)
            dist.all_gather_into_tensor(a, x, group=u)
            expect = torch.cat([U.make_input(r, n, dtype) for r in range(world)])
            U.assert_same(a, expect, f"all_gather_into_tensor {dtype} n={n} rank={rank}")
    # 2-D output, and in place (input is this rank's slot of the output).
    out = torch.empty(world, 5)
    out[rank].copy_(U.make_input(rank, 5, torch.float32))
    dist.all_gather_into_tensor(out, out[rank], group=u)
    b = torch.empty(world * 5)  # gloo wants a flat output
    dist.all_gather_into_tensor(b, U.make_input(rank, 5, torch.float32), group=g)
    U.assert_same(out.reshape(-1), b, f"all_gather_into_tensor in place rank={rank}")
    # Coalesced (FSDP's pattern).
    ins = [U.make_input(rank, n, torch.float32, salt=n) for n in (3, 8)]
    outs = [torch.empty(world * t.numel()) for t in ins]
    with dist._coalescing_manager(group=u, async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i, group=u)
    cm.wait()
    for o, n in zip(outs, (3, 8)):
        expect = torch.cat([U.make_input(r, n, torch.float32, salt=n) for r in range(world)])
        U.assert_same(o, expect, f"all_gather_into_tensor_coalesced n={n} rank={rank}")


def check_reduce_scatter(rank, world, u, g):
    for dtype in [torch.float32, torch.int64, torch.bfloat16]:
        for op in OPS:
            for n in COUNTS:
                ins = [U.make_input(rank, n, dtype, salt=r) for r in range(world)]
                a, b = torch.empty(n, dtype=dtype), torch.empty(n, dtype=dtype)
                dist.reduce_scatter(a, [t.clone() for t in ins], op=op, group=u)
                dist.reduce_scatter(b, [t.clone() for t in ins], op=op, group=g)
                U.assert_same(a, b, f"reduce_scatter {op} {dtype} n={n} rank={rank}")
                x = torch.cat(ins)
                a, b = torch.empty(n, dtype=dtype), torch.empty(n, dtype=dtype)
                dist.reduce_scatter_tensor(a, x.clone(), op=op, group=u)
                dist.reduce_scatter_tensor(b, x.clone(), op=op, group=g)
                U.assert_same(a, b, f"reduce_scatter_tensor {op} {dtype} n={n} rank={rank}")
    # Uneven list sizes: rank r receives r+2 elements.
    ins = [U.make_input(rank, r + 2, torch.float32, salt=r) for r in range(world)]
    a, b = torch.empty(rank + 2), torch.empty(rank + 2)
    dist.reduce_scatter(a, [t.clone() for t in ins], group=u)
    dist.reduce_scatter(b, [t.clone() for t in ins], group=g)
    U.assert_same(a, b, f"reduce_scatter uneven rank={rank}")
    # AVG and PREMUL_SUM (FSDP reduce-scatters gradients with them).
    x = torch.cat([U.make_input(rank, 6, torch.float32, salt=r) for r in range(world)])
    a, b = torch.empty(6), torch.empty(6)
    dist.reduce_scatter_tensor(a, x.clone(), op=dist.ReduceOp.AVG, group=u)
    dist.reduce_scatter_tensor(b, x.clone(), group=g)
    U.assert_same(a, b / world, f"reduce_scatter_tensor AVG rank={rank}")
    a, b = torch.empty(6), torch.empty(6)
    dist.reduce_scatter_tensor(a, x.clone(), op=dist._make_nccl_premul_sum(0.5), group=u)
    dist.reduce_scatter_tensor(b, x.clone() * 0.5, group=g)
    U.assert_same(a, b, f"reduce_scatter_tensor PREMUL_SUM rank={rank}")
    # In place: the output is this rank's slot of the input.
    x2 = x.clone().reshape(world, 6)
    dist.reduce_scatter_tensor(x2[rank], x2, group=u)
    b = torch.empty(6)
    dist.reduce_scatter_tensor(b, x.clone(), group=g)
    U.assert_same(x2[rank], b, f"reduce_scatter_tensor in place rank={rank}")
    # Coalesced.
    ins = [torch.cat([U.make_input(rank, n, torch.float32, salt=r) for r in range(world)]) for n in (2, 9)]
    outs = [torch.empty(n) for n in (2, 9)]
    with dist._coalescing_manager(group=u, async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i, group=u)
    cm.wait()
    for o, i in zip(outs, ins):
        b = torch.empty_like(o)
        dist.reduce_scatter_tensor(b, i.clone(), group=g)
        U.assert_same(o, b, f"reduce_scatter_tensor_coalesced n={o.numel()} rank={rank}")


def check_all_to_all(rank, world, u, g):
    for dtype in MOVE_DTYPES:
        x = U.make_input(rank, 3 * world, dtype).reshape(world, 3)
        a, b = torch.empty_like(x), torch.empty_like(x)
        dist.all_to_all_single(a, x, group=u)
        if dtype in (torch.float32, torch.int64):
            dist.all_to_all_single(b, x, group=g)
            U.assert_same(a, b, f"all_to_all_single {dtype} rank={rank}")
        expect = torch.stack([U.make_input(r, 3 * world, dtype).reshape(world, 3)[rank] for r in range(world)])
        U.assert_same(a, expect, f"all_to_all_single {dtype} rank={rank}")
    # Uneven splits: rank i sends (i + j) % 3 rows of 2 to rank j.
    in_splits = [(rank + j) % 3 for j in range(world)]
    out_splits = [(j + rank) % 3 for j in range(world)]
    x = U.make_input(rank, 2 * sum(in_splits), torch.float32).reshape(-1, 2)
    a = torch.empty(sum(out_splits), 2)
    b = torch.empty(sum(out_splits), 2)
    dist.all_to_all_single(a, x, out_splits, in_splits, group=u)
    dist.all_to_all_single(b, x, out_splits, in_splits, group=g)
    U.assert_same(a, b, f"all_to_all_single uneven rank={rank}")
    # List form: even sizes against gloo; uneven (gloo refuses) against the exact expectation.
    ins = [U.make_input(rank, 4, torch.float32, salt=j) for j in range(world)]
    a, b = [torch.empty(4) for _ in range(world)], [torch.empty(4) for _ in range(world)]
    dist.all_to_all(a, ins, group=u)
    dist.all_to_all(b, ins, group=g)
    for j in range(world):
        U.assert_same(a[j], b[j], f"all_to_all list from {j} rank={rank}")
    ins = [U.make_input(rank, rank + j, torch.float32, salt=j) for j in range(world)]
    a = [torch.empty(j + rank) for j in range(world)]
    dist.all_to_all(a, ins, group=u)
    for j in range(world):
        U.assert_same(a[j], U.make_input(j, j + rank, torch.float32, salt=rank), f"all_to_all uneven from {j}")


def check_gather_scatter(rank, world, u, g):
    for root in range(world):
        for dtype in [torch.float32, torch.int16, torch.bool]:
            x = U.make_input(rank, 5, dtype)
            outs = [torch.empty(5, dtype=dtype) for _ in range(world)] if rank == root else None
            dist.gather(x, outs, group_dst=root, group=u)
            if rank == root:
                for r in range(world):
                    U.assert_same(outs[r], U.make_input(r, 5, dtype), f"gather root={root} {dtype} from {r}")
            out = torch.empty(5, dtype=dtype)
            ins = [U.make_input(r, 5, dtype, salt=root) for r in range(world)] if rank == root else None
            dist.scatter(out, ins, group_src=root, group=u)
            U.assert_same(out, U.make_input(rank, 5, dtype, salt=root), f"scatter root={root} {dtype} rank={rank}")


def check_p2p(rank, world, u, g):
    if world == 1:
        return
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    # Blocking ring with even/odd ordering so that it cannot deadlock.
    x = U.make_input(rank, 9, torch.float64)
    y = torch.empty(9, dtype=torch.float64)
    if rank % 2 == 0:
        dist.send(x, group_dst=nxt, group=u)
        dist.recv(y, group_src=prv, group=u)
    else:
        dist.recv(y, group_src=prv, group=u)
        dist.send(x, group_dst=nxt, group=u)
    U.assert_same(y, U.make_input(prv, 9, torch.float64), f"send/recv ring rank={rank}")
    # isend/irecv, non-contiguous receive.
    r = torch.empty(4, 3).t()
    reqs = [dist.isend(U.make_input(rank, 12, torch.float32).reshape(3, 4), group_dst=nxt, group=u),
            dist.irecv(r, group_src=prv, group=u)]
    for q in reqs:
        q.wait()
    U.assert_same(r, U.make_input(prv, 12, torch.float32).reshape(3, 4), f"isend/irecv non-contig rank={rank}")
    # batch_isend_irecv: both directions, several tags, one coalesced uccl batch.
    ops, recvs = [], []
    for tag in (0, 7):
        recvs.append(torch.empty(5, dtype=torch.int64))
        recvs.append(torch.empty(3, dtype=torch.bool))
        ops.append(dist.P2POp(dist.isend, U.make_input(rank, 5, torch.int64, salt=tag), group=u, group_peer=nxt, tag=tag))
        ops.append(dist.P2POp(dist.irecv, recvs[-2], group=u, group_peer=prv, tag=tag))
        ops.append(dist.P2POp(dist.isend, U.make_input(rank, 3, torch.bool, salt=tag), group=u, group_peer=prv, tag=tag))
        ops.append(dist.P2POp(dist.irecv, recvs[-1], group=u, group_peer=nxt, tag=tag))
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    for i, tag in enumerate((0, 7)):
        U.assert_same(recvs[2 * i], U.make_input(prv, 5, torch.int64, salt=tag), f"batch p2p tag={tag} rank={rank}")
        U.assert_same(recvs[2 * i + 1], U.make_input(nxt, 3, torch.bool, salt=tag), f"batch p2p tag={tag} rank={rank}")


def check_barrier_and_errors(rank, world, u, g):
    dist.barrier(group=u)
    dist.monitored_barrier(group=g)  # gloo still works next to uccl
    # Bad inputs raise at the call, naming what was wrong, and leave the group usable.
    pg = u  # called on the ProcessGroup directly: below torch's own Python-side checks
    with pytest.raises(TypeError, match=r"output_tensor_list\[0\] has dtype Double but the input has dtype Float"):
        pg.allgather([[torch.empty(2, dtype=torch.float64) for _ in range(world)]], [torch.ones(2)])
    with pytest.raises(ValueError, match="has 1 tensors but the group has"):
        if world > 1:
            pg.allgather([[torch.empty(2)]], [torch.ones(2)])
        else:
            raise ValueError("has 1 tensors but the group has")
    with pytest.raises(ValueError, match="expected input numel"):
        dist.all_gather_into_tensor(torch.empty(world * 2 + 1), torch.ones(2), group=u)
    # CPU tensors and staged accelerators only (test_torch_device.py): the device check, reached
    # directly (the dispatcher keeps meta tensors away from backends, and this torch has no CUDA).
    with pytest.raises(NotImplementedError, match="is on meta, whose memory no device backend of this uccl build owns"):
        pg._get_backend(torch.device("cpu")).allreduce([torch.empty(3, device="meta")])
    # Bitwise reductions on integers (what gloo offers): rank r contributes 1 << r and 3.
    for op, want in ((dist.ReduceOp.BOR, (1 << world) - 1), (dist.ReduceOp.BAND, 1 if world == 1 else 0),
                     (dist.ReduceOp.BXOR, (1 << world) - 1)):
        t = torch.full((3,), 1 << dist.get_rank(u), dtype=torch.int64)
        dist.all_reduce(t, op=op, group=u)
        assert t.tolist() == [want] * 3, (op, t.tolist(), want)
    with pytest.raises(ValueError, match="bitwise reductions need integer or bool"):
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BXOR, group=u)
    t = torch.ones(2)
    dist.all_reduce(t, group=u)
    assert t.tolist() == [world, world]


CHECKS = (check_all_reduce, check_all_reduce_coalesced, check_broadcast, check_reduce, check_all_gather,
          check_all_gather_into_tensor, check_reduce_scatter, check_all_to_all, check_gather_scatter, check_p2p,
          check_barrier_and_errors)


def ops_worker(rank, world, port):
    """World 5; the sweep runs on the whole world and on uccl sub-groups of 1-4 ranks (torch's
    new_group: a fresh uccl communicator over the group's prefixed store), each beside a gloo
    group of the same ranks, and once more over uccl groups pinned to the tcp and shm transports."""
    import uccl

    U.init_uccl(rank, world, port)
    from uccl import _torch_backend

    assert _torch_backend.describe(), "describe() of the default group is empty"
    groups = [(dist.group.WORLD, dist.new_group(backend="gloo"), f"world {world}")]
    for k in range(1, world):
        # Every rank creates every group (torch's rule); only members get a group back.
        u = dist.new_group(ranks=list(range(k)), backend="uccl")
        g = dist.new_group(ranks=list(range(k)), backend="gloo")
        groups.append((u, g, f"sub-group of {k}"))
    for transport in ("tcp", "shm"):
        u = dist.new_group(backend="uccl", pg_options=uccl.ProcessGroupOptions(transport=transport))
        groups.append((u, groups[0][1], f"transport {transport}"))
    for u, g, label in groups:
        if u == dist.GroupMember.NON_GROUP_MEMBER:
            continue
        r, n = dist.get_rank(u), dist.get_world_size(u)
        for check in CHECKS:
            try:
                check(r, n, u, g)
            except Exception as e:
                raise AssertionError(f"{check.__name__} on {label} (group rank {r} of {n}) failed: {e}") from e
    dist.barrier()
    dist.destroy_process_group()


def test_ops_against_gloo_world_sizes_1_to_5():
    U.spawn(ops_worker, 5, deadline_s=240)
