"""The calibration run: every rank, under its real quota and on its real network, measures what
the planner's cost model needs (uccl/planner/calibration.py says what and why).

    torchrun ... -m uccl.planner.calibrate --spec SPEC.json

SPEC: {"model": {hidden, heads, seq, vocab}, "tps": [..], "micro_batches": [..],
       "partitions": [{"kind": "coll"|"p2p", "shape": str, "groups": [[ranks]..]}],
       "sizes": [bytes..], "reps": 3, "min_s": 1.0, "kind_of_rank": [device kind per rank]}
Rank 0 prints `RESULT {json}`: a calibration document {"comm": {shape: {op: {bytes: s}}},
"compute": {kind: {"block": {"t,b": s}, "head": {..}, "adam_per_param": s}}}.

All ranks measure compute at the same time (a host's ranks share its quota, as in training),
then every partition's groups run each operation at the same time (as a layout's groups do).
A collective's time is, per repetition, the slowest rank's; the mean over repetitions is kept
(under a quota a few repetitions absorb the throttled waits: a median would miss them).
Compute: the median over the ranks of a kind (the planner takes a stage's slowest kind).
"""
from __future__ import annotations

import argparse
import json
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


def measure_compute(m: dict, tps, bs, min_s: float) -> dict:
    import torch
    import torch.nn.functional as F
    from ..parallel.model import Block, GPTConfig, full_init
    torch.set_num_threads(1)
    cfg = GPTConfig(vocab=m["vocab"], hidden=m["hidden"], heads=m["heads"], layers=1, seq=m["seq"])
    full = full_init(cfg)
    out = {"block": {}, "head": {}}
    for t in tps:
        blk = Block(cfg, 0, full, _LocalTP(t))
        for b in bs:
            x = torch.randn(cfg.seq // t, b, cfg.hidden, requires_grad=True)
            out["block"][f"{t},{b}"] = _timed(lambda: blk(x).sum().backward(), min_s)
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


def measure_comm(part: dict, rank: int, sizes, reps: int, group) -> dict:
    """Per operation and size: `reps` rounds of `ops_per_round(size)` back-to-back operations
    (as a training step issues them); a round's time / its count is the amortised cost of one
    operation, throttled waits included. '<op>_async' (reduce_scatter, all_gather): the round's
    operations issued at once with async_op=True, then waited for, as ZeRO issues its gradient
    and parameter buckets (uccl's progress thread drives them, not the caller). Under a quota a single operation timed after a
    barrier costs about one quota period (the barrier spent the budget): 50-100 ms here, where
    the trainer's back-to-back TP operations cost ~8 ms each."""
    import torch
    import torch.distributed as dist
    mine = next((g for g in part["groups"] if rank in g), None)
    ops = ("p2p",) if part["kind"] == "p2p" else ("all_gather", "reduce_scatter", "all_reduce",
                                                   "reduce_scatter_async", "all_gather_async")
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
                    peer = (mine[1] if rank == mine[0] else mine[0]) if op == "p2p" else None
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
                            for w in dist.batch_isend_irecv([dist.P2POp(fn, buf, peer, group)]):
                                w.wait()
                    dt = (time.perf_counter() - t0) / count
                if i:
                    times.append(dt)
            out.setdefault(op, {})[str(size)] = times
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
    dist.barrier()
    compute = measure_compute(spec["model"], spec["tps"], spec["micro_batches"], float(spec.get("min_s", 1.0)))
    dist.barrier()
    comm = [measure_comm(part, rank, spec["sizes"], int(spec.get("reps", 3)), g)
            for part, g in zip(spec["partitions"], groups)]
    every = [None] * world
    dist.all_gather_object(every, {"rank": rank, "compute": compute, "comm": comm})
    if rank == 0:
        kinds = spec.get("kind_of_rank") or ["default"] * world
        doc = {"comm": {}, "compute": {}, "wall_s": time.perf_counter() - t_start}
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
                for what in ("block", "head")}
            doc["compute"][kind]["adam_per_param"] = statistics.median(r["adam_per_param"] for r in rows)
        print("RESULT " + json.dumps(doc), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
