"""The calibration run: every rank, under its real quota and on its real network, measures what
the planner's cost model needs (uccl/planner/calibration.py says what and why).

    torchrun ... -m uccl.planner.calibrate --spec SPEC.json

SPEC: {"model": {hidden, heads, seq, vocab}, "tps": [..], "micro_batches": [..],
       "partitions": [{"kind": "coll"|"p2p", "shape": str, "groups": [[ranks]..]}],
       "sizes": [bytes..], "reps": 3, "min_s": 1.0, "kind_of_rank": [device kind per rank],
       "links": [{"level": str, "pair": [r0, r1]}], "link_bytes": 4194304,
       "tp_in_place": [t..], "p2p_in_place": true}  (TP sizes whose blocks are also timed with
       their real TP groups; messages also timed between units of compute)
Rank 0 prints `RESULT {json}`: a calibration document {"comm": {shape: {op: {bytes: s}}},
"compute": {kind: {"block": {"t,b": s}, "head": {..}, "block_tp": {..}, "adam_per_param": s}},
"links": {level: Gbit/s}}.

All ranks measure compute at the same time (a host's ranks share its quota, as in training),
then every partition's groups run each operation at the same time (as a layout's groups do).
A collective's time is, per repetition, the slowest rank's; the mean over repetitions is kept
(under a quota a few repetitions absorb the throttled waits: a median would miss them).
Compute: the median over the ranks of a kind (the planner takes a stage's slowest kind).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time


class _LocalTP:
    """A TP shard's shapes without communication: gather = repeat, scatter = first chunk."""

    def __init__(self, size):
        self.size, self.rank, self.rec = size, 0, None

    def all_gather_seq(self, x):
        import torch
        return torch.cat([x] * self.size, 0)

    def reduce_scatter_seq(self, x):
        return x[: x.shape[0] // self.size].contiguous()


def _timed(fn, min_s):
    fn()
    t, n = time.perf_counter(), 0
    while n < 3 or time.perf_counter() - t < min_s:
        fn()
        n += 1
    return (time.perf_counter() - t) / n


def _timed_n(fn, n):
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def measure_compute(m: dict, tps, bs, min_s: float, tp_comms=None) -> dict:
    """tp_comms: {t: TPComm of this rank's TP group} for the TP sizes to time in place as well:
    'block_tp' is the same block with its real sequence-parallel communication, every TP group
    at once, as a stage runs it; block_tp - block is what TP costs inside a step (the blocking
    operations' waits and wake-ups between compute, which operations timed back to back miss)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from ..parallel.model import Block, GPTConfig, full_init
    torch.set_num_threads(1)
    cfg = GPTConfig(vocab=m["vocab"], hidden=m["hidden"], heads=m["heads"], layers=1, seq=m["seq"])
    full = full_init(cfg)
    out = {"block": {}, "head": {}}
    for t in tps:
        blk = Block(cfg, 0, full, _LocalTP(t))
        real = Block(cfg, 0, full, tp_comms[t]) if tp_comms and t in tp_comms else None
        for b in bs:
            x = torch.randn(cfg.seq // t, b, cfg.hidden, requires_grad=True)
            out["block"][f"{t},{b}"] = _timed(lambda: blk(x).sum().backward(), min_s)
            if real is not None:  # a TP group's ranks must run as many blocks: the largest count of any rank
                n = torch.tensor([max(3, math.ceil(min_s / out["block"][f"{t},{b}"]))], dtype=torch.int64)
                dist.all_reduce(n, op=dist.ReduceOp.MAX)
                out.setdefault("block_tp", {})[f"{t},{b}"] = _timed_n(lambda: real(x).sum().backward(), int(n))
            w = full["head.w"].clone().requires_grad_()
            lw, lb = torch.ones(cfg.hidden, requires_grad=True), torch.zeros(cfg.hidden, requires_grad=True)
            tgt = torch.randint(0, cfg.vocab, (cfg.seq // t, b))

            def head():
                y = F.layer_norm(x.detach(), (cfg.hidden,), lw, lb)
                loss = F.cross_entropy(F.linear(y, w).reshape(-1, cfg.vocab), tgt.reshape(-1), reduction="sum")
                loss.backward()
            out["head"][f"{t},{b}"] = _timed(head, min_s)
    n = 1 << 18
    p = torch.nn.Parameter(torch.zeros(n))
    opt = torch.optim.Adam([p], lr=1e-3, foreach=False)
    src, flat = torch.randn(n), torch.zeros(n)

    def adam():
        flat.copy_(src)  # the bucket's gradient copy
        p.grad = flat
        opt.step()
        p.detach().clone()  # the all_gather's source
    out["adam_per_param"] = _timed(adam, min_s) / n
    return out


def stage_work(m: dict):
    """One unit of a stage's compute (a block's forward + backward, t = 1, micro-batch 1): what a
    pipeline stage does between two messages (p2p_in_place)."""
    import torch
    from ..parallel.model import Block, GPTConfig, full_init
    cfg = GPTConfig(vocab=m["vocab"], hidden=m["hidden"], heads=m["heads"], layers=1, seq=m["seq"])
    blk = Block(cfg, 0, full_init(cfg), _LocalTP(1))
    x = torch.randn(cfg.seq, 1, cfg.hidden, requires_grad=True)
    return lambda: blk(x).sum().backward()


def measure_comm(part: dict, rank: int, sizes, reps: int, group, work=None) -> dict:
    """Per operation and size: `reps` rounds of `ops_per_round(size)` back-to-back operations
    (as a training step issues them); a round's time / its count is the amortised cost of one
    operation, throttled waits included. '<op>_async' (reduce_scatter, all_gather): the round's
    operations issued at once with async_op=True, then waited for, as ZeRO issues its gradient
    and parameter buckets (uccl's progress thread drives them, not the caller). Under a quota a single operation timed after a
    barrier costs about one quota period (the barrier spent the budget): 50-100 ms here, where
    the trainer's back-to-back TP operations cost ~8 ms each.
    'p2p_in_place' (with `work`): the pair passes the message back and forth with a unit of
    compute before each send, as pipeline stages do; a message costs the round's time / its
    count less the sender's compute (this rank's mean). Under a quota a message that arrives
    after compute costs more than one sent back to back: the receiver sleeps, and the sender
    and receiver have spent their period's budget (the wake-ups wait for the next period)."""
    import torch
    import torch.distributed as dist
    mine = next((g for g in part["groups"] if rank in g), None)
    ops = (("p2p", "p2p_in_place") if work else ("p2p",)) if part["kind"] == "p2p" else (
        "all_gather", "reduce_scatter", "all_reduce", "reduce_scatter_async", "all_gather_async")
    out = {}
    for op in ops:
        for size in sizes:
            count = ops_per_round(size)
            times = []
            for i in range(reps + 1):
                dist.barrier()
                dt = 0.0
                if mine is not None:
                    n = len(mine)
                    elems = max(n, (size // 4) // n * n)
                    big, small = torch.ones(elems), torch.empty(elems // n)
                    buf = torch.ones(max(1, size // 4))
                    peer = (mine[1] if rank == mine[0] else mine[0]) if op.startswith("p2p") else None
                    worked = []
                    if op.endswith("_async"):  # one buffer pair per operation, as the buckets have
                        bigs = [torch.ones(elems) for _ in range(count)]
                        smalls = [torch.ones(elems // n) for _ in range(count)]
                    t0 = time.perf_counter()
                    if op == "reduce_scatter_async":
                        for w in [dist.reduce_scatter_tensor(smalls[j], bigs[j], group=group, async_op=True)
                                  for j in range(count)]:
                            w.wait()
                    elif op == "all_gather_async":
                        for w in [dist.all_gather_into_tensor(bigs[j], smalls[j], group=group, async_op=True)
                                  for j in range(count)]:
                            w.wait()
                    for j in range(count if not op.endswith("_async") else 0):
                        if op == "all_gather":
                            dist.all_gather_into_tensor(big, small, group=group)
                        elif op == "reduce_scatter":
                            dist.reduce_scatter_tensor(small, big, group=group)
                        elif op == "all_reduce":
                            dist.all_reduce(big, group=group)
                        else:  # one message, alternating direction (forward, then backward)
                            fn = dist.isend if (rank == mine[0]) == (j % 2 == 0) else dist.irecv
                            if op == "p2p_in_place" and fn is dist.isend:
                                w0 = time.perf_counter()
                                work()
                                worked.append(time.perf_counter() - w0)
                            for w in dist.batch_isend_irecv([dist.P2POp(fn, buf, peer, group)]):
                                w.wait()
                    dt = (time.perf_counter() - t0) / count
                    if worked:  # each message waited for one unit of compute (this rank's or the peer's)
                        dt = max(1e-6, dt - sum(worked) / len(worked))
                if i:
                    times.append(dt)
            out.setdefault(op, {})[str(size)] = times
    return out


def measure_links(items, rank: int, world: int, nbytes: int, reps: int) -> dict:
    """Each item's pair (calibration.link_items) runs uccl-perf's sendrecv (uccl.perf.Measure:
    its C++ timed loop, each rank sending to the other) on a uccl communicator of the two, at
    nbytes / 4 and nbytes, the fastest of `reps` timings each; the rate is the slope, 3/4 nbytes
    over the difference, which cancels the per-message latency (as uccl's own link probe does).
    Items run one after another (no two share a link). Returns {level: Gbit/s} on every rank."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_store
    from ..comm import Communicator
    from ..perf import Buffers, Measure, get_collective
    comm = Communicator(rank, world, dist.PrefixStore("uccl-planner-links", _get_default_store()))
    bufs, coll = Buffers(nbytes), get_collective("sendrecv")
    mine = {}
    for it in items:
        sub = comm.new_group(it["pair"])  # every rank calls it; ranks outside get None
        if sub is not None:
            t = []
            for size in (nbytes // 4, nbytes):
                m = Measure(sub, bufs, coll, "uint8", "sum", 0, False, size)
                m.run(1, 1, True)  # warm-up: connections, first touch of the buffers
                t.append(min(m.run(0, 1, True) for _ in range(reps)))
            mine[it["level"]] = 0.75 * nbytes * 8 / 1e9 / max(t[1] - t[0], 1e-9)
        comm.barrier()
    every = [None] * world
    dist.all_gather_object(every, mine)
    out = {}
    for e in every:  # a pair's slower side
        for level, gbit in e.items():
            out[level] = min(out.get(level, gbit), gbit)
    return out


def ops_per_round(size: int) -> int:
    return 8 if size <= (64 << 10) else 3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m uccl.planner.calibrate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", required=True)
    a = ap.parse_args(argv)
    with open(a.spec) as f:
        spec = json.load(f)
    import torch.distributed as dist
    import uccl  # noqa: F401  registers the backend
    dist.init_process_group("uccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    t_start = time.perf_counter()
    groups = []
    for part in spec["partitions"]:  # every rank creates every group, in the same order
        mine = None
        for g in part["groups"]:
            pg = dist.new_group(g, backend="uccl")
            if rank in g:
                mine = pg
        groups.append(mine)
    from ..parallel.model import TPComm
    tp_comms = {}
    for t in spec.get("tp_in_place", []):  # tp fastest: groups of t consecutive ranks
        for first in range(0, world, t):
            pg = dist.new_group(list(range(first, first + t)), backend="uccl")
            if first <= rank < first + t:
                tp_comms[t] = TPComm(pg, t, rank - first)
    dist.barrier()
    compute = measure_compute(spec["model"], spec["tps"], spec["micro_batches"], float(spec.get("min_s", 1.0)),
                              tp_comms)
    dist.barrier()
    work = stage_work(spec["model"]) if spec.get("p2p_in_place") else None
    comm = [measure_comm(part, rank, spec["sizes"], int(spec.get("reps", 3)), g, work)
            for part, g in zip(spec["partitions"], groups)]
    links = measure_links(spec["links"], rank, world, int(spec.get("link_bytes", 4 << 20)),
                          int(spec.get("reps", 3))) if spec.get("links") else {}
    every = [None] * world
    dist.all_gather_object(every, {"rank": rank, "compute": compute, "comm": comm})
    if rank == 0:
        kinds = spec.get("kind_of_rank") or ["default"] * world
        doc = {"comm": {}, "compute": {}, "wall_s": time.perf_counter() - t_start}
        if links:
            doc["links"] = links
        for pi, part in enumerate(spec["partitions"]):
            ops = doc["comm"].setdefault(part["shape"], {})
            for op, per_size in every[0]["comm"][pi].items():
                for size in per_size:
                    reps = len(per_size[size])
                    worst = [max(e["comm"][pi][op][size][i] for e in every) for i in range(reps)]
                    ops.setdefault(op, {})[size] = statistics.fmean(worst)
        for kind in sorted(set(kinds)):
            rows = [e["compute"] for e in every if kinds[e["rank"]] == kind]
            doc["compute"][kind] = {
                what: {k: statistics.median(r[what][k] for r in rows) for k in rows[0][what]}
                for what in ("block", "head", "block_tp") if what in rows[0]}
            doc["compute"][kind]["adam_per_param"] = statistics.median(r["adam_per_param"] for r in rows)
        print("RESULT " + json.dumps(doc), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
