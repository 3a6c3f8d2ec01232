"""A random soak of the torch backend on an accelerator (run inside each rank; test_torch_device.py
runs it on the test device, tests/gpu/test_gpu_torch.py on CUDA).

The op-by-op checks (test_torch_ops.py, test_torch_device.py) call each op once, each rank on one
device. Training jobs mix them: asynchronous collectives in flight together (DDP's buckets, FSDP's
prefetch), CPU tensors beside accelerator ones (a metric, a barrier's tensor), p2p between
collectives (pipelining). One seed draws a sequence of torch.distributed calls that every rank
draws alike: the op (all_reduce with every ReduceOp, broadcast, reduce, all_gather and its
into-tensor form, reduce_scatter_tensor and the list form, all_to_all_single with uneven splits,
all_to_all, gather, scatter, a batch_isend_irecv ring), dtype, count, root, and per rank whether
its tensors are on the CPU or the accelerator; calls go out in batches of one to four with
async_op=True before any is waited for (work.wait(): on an accelerator, the current stream
waits). Inputs are small integers from (seed, op, rank), so every rank computes the exact result
of every op on the CPU; AVG runs only where the world size is a power of two (exact division)
and PREMUL_SUM with the factor 2. Each rank's tensors also draw a layout per call: dense, strided
(every other element of a larger buffer: staged through a contiguous copy, even on the CPU) or,
for floating dtypes, a leaf that requires grad (written below autograd, as Gloo does); the layouts
come from a stream of their own, so a seed's calls are those it drew before layouts existed.
"""
import numpy as np
import torch
import torch.distributed as dist

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.int8,
          torch.uint8]
OPS = ["all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor",
       "reduce_scatter", "all_to_all_single", "all_to_all", "gather", "scatter", "p2p_ring"]
COUNTS = [0, 1, 3, 31, 1000, 4099, 70001]
REDS = ["sum", "max", "min", "product", "avg", "premul"]
LAYOUTS = ["dense", "dense", "strided", "leaf"]


def plan(seed, world, n_ops):
    rng = np.random.default_rng([seed, world, 15])
    ops = []
    for i in range(n_ops):
        dtype = DTYPES[rng.integers(len(DTYPES))]
        red = REDS[rng.integers(len(REDS))]
        floating = dtype.is_floating_point
        if red in ("avg", "premul") and (not floating or (red == "avg" and world & (world - 1))):
            red = "sum"
        if red == "product" and dtype == torch.uint8:
            red = "max"
        n = int(COUNTS[rng.integers(len(COUNTS))])
        ops.append({"i": i, "op": OPS[rng.integers(len(OPS))], "dtype": dtype, "red": red, "n": n,
                    "root": int(rng.integers(world)), "shift": int(rng.integers(1, world)) if world > 1 else 0,
                    "on_dev": [bool(rng.random() < 0.7) for _ in range(world)],
                    "splits": [int(rng.integers(0, 5)) for _ in range(world * world)],
                    "batch_end": bool(rng.random() < 0.45)})
    layouts = np.random.default_rng([seed, world, 16])
    for o in ops:
        o["layout"] = [LAYOUTS[layouts.integers(len(LAYOUTS))] for _ in range(world)]
    if ops:
        ops[-1]["batch_end"] = True
    return ops


def describe(o):
    return (f"op #{o['i']} {o['op']} {o['dtype']} n={o['n']} red={o['red']} root={o['root']} "
            f"on_dev={o['on_dev']} layout={o.get('layout')}")


def _placed(t, where, layout):
    """t on `where` in the drawn layout: a copy, strided (every other element along the last
    dimension of a buffer of 99s), or a leaf that requires grad (floating dtypes)."""
    if layout == "strided" and t.dim() > 0:
        shape = list(t.shape)
        base = torch.full(shape[:-1] + [2 * shape[-1]], 99, dtype=t.dtype, device=where)
        v = base[..., ::2]
        with torch.no_grad():
            v.copy_(t)
        return v
    out = t.to(where, copy=True)
    if layout == "leaf" and t.is_floating_point():
        out.requires_grad_()
    return out


def _input(seed, o, rank, n):
    g = torch.Generator().manual_seed(seed * 1000003 + o["i"] * 1009 + rank)
    if o["red"] == "product":  # products of a few ranks' factors stay small and exact
        choices = torch.tensor([1, 2] if o["dtype"] == torch.uint8 else [1, 2, -1])
        vals = choices[torch.randint(0, len(choices), (n,), generator=g)]
    elif o["dtype"] == torch.uint8:
        vals = torch.randint(0, 40, (n,), generator=g)
    else:
        vals = torch.randint(-20, 21, (n,), generator=g)
    return vals.to(o["dtype"])


def _reduce(ts, red, world):
    acc = ts[0].to(torch.float64) if ts[0].is_floating_point() else ts[0].to(torch.int64)
    for t in ts[1:]:
        t = t.to(acc.dtype)
        acc = {"sum": torch.add, "avg": torch.add, "premul": torch.add, "max": torch.maximum,
               "min": torch.minimum, "product": torch.mul}[red](acc, t)
    if red == "avg":
        acc = acc / world
    if red == "premul":
        acc = acc * 2
    return acc.to(ts[0].dtype)


def _redop(red):
    if red == "premul":
        return dist._make_nccl_premul_sum(2.0)
    return {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
            "product": dist.ReduceOp.PRODUCT, "avg": dist.ReduceOp.AVG}[red]


def _issue(o, rank, world, seed, device, group=None):
    """Issues one call asynchronously; returns (works, check) where check() yields
    (what, got, want) once the works were waited for."""
    n, root, dt = o["n"], o["root"], o["dtype"]
    where = device if o["on_dev"][rank] else "cpu"
    layout = o["layout"][rank]
    put = lambda t: _placed(t, where, layout)  # noqa: E731
    # 7: a receive that never lands shows
    zeros = lambda k: put(torch.full((k,), 7, dtype=dt))  # noqa: E731
    ins = lambda r, k=n: _input(seed, o, r, k)  # noqa: E731
    kind = o["op"]
    if kind == "all_reduce":
        x = put(ins(rank))
        w = dist.all_reduce(x, op=_redop(o["red"]), async_op=True, group=group)
        return [w], lambda: [("result", x, _reduce([ins(r) for r in range(world)], o["red"], world))]
    if kind == "broadcast":
        x = put(ins(rank))
        w = dist.broadcast(x, src=root, async_op=True, group=group)
        return [w], lambda: [("result", x, ins(root))]
    if kind == "reduce":
        red = "sum" if o["red"] in ("avg", "premul") else o["red"]  # (torch: reduce has no AVG on every backend)
        x = put(ins(rank))
        w = dist.reduce(x, dst=root, op=_redop(red), async_op=True, group=group)
        if rank != root:
            return [w], lambda: []
        return [w], lambda: [("result at the root", x, _reduce([ins(r) for r in range(world)], red, world))]
    if kind == "all_gather":
        outs = [zeros(n) for _ in range(world)]
        w = dist.all_gather(outs, put(ins(rank)), async_op=True, group=group)
        return [w], lambda: [(f"block {r}", outs[r], ins(r)) for r in range(world)]
    if kind == "all_gather_into_tensor":
        out = zeros(n * world)
        w = dist.all_gather_into_tensor(out, put(ins(rank)), async_op=True, group=group)
        return [w], lambda: [("result", out, torch.cat([ins(r) for r in range(world)]))]
    if kind in ("reduce_scatter_tensor", "reduce_scatter"):
        red = o["red"]
        out = zeros(n)
        full = ins(rank, n * world)
        if kind == "reduce_scatter_tensor":
            w = dist.reduce_scatter_tensor(out, put(full), op=_redop(red), async_op=True, group=group)
        else:
            w = dist.reduce_scatter(out, [put(b) for b in full.split(n)] if n else [put(full)] * world,
                                    op=_redop(red), async_op=True, group=group)
        want = _reduce([ins(r, n * world) for r in range(world)], red, world)[rank * n:(rank + 1) * n]
        return [w], lambda: [("result", out, want)]
    if kind == "all_to_all_single":
        sp = o["splits"]  # sp[i * world + j]: rows rank i sends rank j (2 columns each)
        send = [sp[rank * world + j] for j in range(world)]
        recv = [sp[i * world + rank] for i in range(world)]
        src = lambda i: ins(i, 2 * sum(sp[i * world:(i + 1) * world])).reshape(-1, 2)  # noqa: E731
        out = put(torch.full((sum(recv), 2), 7, dtype=dt))
        w = dist.all_to_all_single(out, put(src(rank)), recv, send, async_op=True, group=group)
        parts = [src(i)[sum(sp[i * world:i * world + rank]):sum(sp[i * world:i * world + rank]) + recv[i]]
                 for i in range(world)]
        return [w], lambda: [("result", out, torch.cat(parts))]
    if kind == "all_to_all":
        outs = [zeros(n) for _ in range(world)]
        w = dist.all_to_all(outs, [put(ins(rank, n * world)[j * n:(j + 1) * n]) for j in range(world)],
                            async_op=True, group=group)
        return [w], lambda: [(f"block from {r}", outs[r], ins(r, n * world)[rank * n:(rank + 1) * n])
                             for r in range(world)]
    if kind == "gather":
        outs = [zeros(n) for _ in range(world)] if rank == root else None
        w = dist.gather(put(ins(rank)), outs, dst=root, async_op=True, group=group)
        if rank != root:
            return [w], lambda: []
        return [w], lambda: [(f"block {r}", outs[r], ins(r)) for r in range(world)]
    if kind == "scatter":
        out = zeros(n)
        blocks = [put(ins(root, n * world)[j * n:(j + 1) * n]) for j in range(world)] if rank == root else None
        w = dist.scatter(out, blocks, src=root, async_op=True, group=group)
        return [w], lambda: [("result", out, ins(root, n * world)[rank * n:(rank + 1) * n])]
    if kind == "p2p_ring":
        to, frm = (rank + o["shift"]) % world, (rank - o["shift"]) % world
        out = zeros(n)
        ws = dist.batch_isend_irecv([dist.P2POp(dist.isend, put(ins(rank)), to, group),
                                     dist.P2POp(dist.irecv, out, frm, group)])
        return ws, lambda: [("received", out, ins(frm))]
    raise ValueError(kind)


def soak(rank, world, seed, n_ops, device, group=None):
    """Runs plan(seed) on this rank with `device` as the accelerator, on `group` (a group of every
    rank, in rank order; None: the default one); raises AssertionError naming the seed and the op
    at the first wrong result. Returns how many checks ran."""
    pending, checks = [], 0
    for o in plan(seed, world, n_ops):
        works, check = _issue(o, rank, world, seed, device, group)
        pending.append((o, works, check))
        if not o["batch_end"]:
            continue
        for _, ws, _ in pending:
            for w in ws:
                w.wait()
        for o2, _, check2 in pending:
            for what, got, want in check2():
                got = got.detach().cpu()
                assert got.dtype == want.dtype and torch.equal(got, want), (
                    f"seed {seed}, {describe(o2)}: {what} on rank {rank}:\n"
                    f" got  {got.flatten()[:8]}\n want {want.flatten()[:8]}")
                checks += 1
        pending = []
    dist.barrier(group=group)
    return checks


def soak_threads(rank, world, seed, n_ops, device, n_threads):
    """soak() on n_threads threads at once, each on a group of its own (the default group and
    new groups of every rank: separate uccl communicators), each with its plan (seed * 16 + t),
    as a trainer's data-parallel thread beside a pipeline's or a metrics thread. Returns the
    checks of every thread; raises the first thread's failure."""
    import threading
    groups = [None] + [dist.new_group(list(range(world))) for _ in range(n_threads - 1)]
    checks, errors = [0] * n_threads, []

    def run(t):
        try:
            checks[t] = soak(rank, world, seed * 16 + t, n_ops, device, groups[t])
        except BaseException as e:  # noqa: BLE001 - raised below with the thread's name
            import traceback
            errors.append(f"thread {t}: {type(e).__name__}: {e}\n{traceback.format_exc()}")

    threads = [threading.Thread(target=run, args=(t,), name=f"soak {t}") for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise AssertionError("\n".join(errors))
    for g in groups[1:]:
        dist.destroy_process_group(g)
    return checks
