"""Command line trainer: `torchrun ... -m uccl.parallel.train [options]` (or one process).

Prints the groups' descriptions, a report per step on rank 0 and, at the end, one line
`RESULT {json}` with the medians over the timed steps: tokens/s, step time, per-group
communication time (the max over ranks), bytes per group by transport and topology level
(summed over ranks), and the layer split. --trace PATH writes a Chrome trace of one step.

--parts: "uniform", explicit "3,1", "adapt" (Holmes-style: measure each stage's speed on a
transformer block and the head's cost, then split layers by speed), or "adapt:2,1" (declared
stage speeds).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m uccl.parallel.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--layout", choices=("holmes", "naive"), default="holmes")
    ap.add_argument("--parts", default="uniform")
    ap.add_argument("--order", default="", help="stage s on pipeline position ORDER[s], e.g. 1,0")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--bucket-mib", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    ap.add_argument("--trace", default="", help="write a Chrome trace of the first timed step here")
    ap.add_argument("--quiet", action="store_true")
    return ap.parse_args(argv)


def measure_speeds(cfg, tc, coord, world_group_gather, min_s=1.5):
    """Seconds per transformer block (forward+backward of one micro-batch) and the head's cost in
    blocks, per stage (slowest rank of the stage). Each timing runs for at least min_s: a CPU
    quota throttles in 100 ms periods, so shorter timings would see a random share of it."""
    import torch
    from .model import Block, Stage, TPComm, full_init
    full = full_init(cfg, tc.seed)
    one = Stage(cfg, 0, 1, full, TPComm(), True, True)
    x = torch.randn(cfg.seq, tc.micro_batch, cfg.hidden, dtype=cfg.torch_dtype, requires_grad=True)
    tok = torch.randint(0, cfg.vocab, (cfg.seq, tc.micro_batch))

    def timed(fn):
        fn()
        t, n = time.perf_counter(), 0
        while n < 3 or time.perf_counter() - t < min_s:
            fn()
            n += 1
        return (time.perf_counter() - t) / n

    blk = one.blocks[0]
    t_block = timed(lambda: blk(x).sum().backward())
    t_stage = timed(lambda: one(tok, tok, 1).backward())  # embedding + 1 block + head
    del Block
    rows = world_group_gather((coord.pp, t_block, max(t_stage - t_block, 0.0)))
    per_stage = {}
    for s, tb, th in rows:
        cur = per_stage.get(s, (0.0, 0.0))
        per_stage[s] = (max(cur[0], tb), max(cur[1], th))
    return [1.0 / per_stage[s][0] for s in sorted(per_stage)], per_stage[max(per_stage)][1] / per_stage[max(per_stage)][0]


def main(argv=None):
    args = parse_args(argv)
    import torch
    import torch.distributed as dist
    import uccl  # noqa: F401  registers the backend
    from . import partition
    from .model import GPTConfig
    from .report import write_chrome_trace
    from .trainer import TrainConfig, Trainer

    torch.set_num_threads(args.threads)
    if not dist.is_initialized():
        if "RANK" not in os.environ:  # one process, no launcher
            os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
        dist.init_process_group("uccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = GPTConfig(vocab=args.vocab, hidden=args.hidden, heads=args.heads, layers=args.layers, seq=args.seq)
    tc = TrainConfig(tp=args.tp, pp=args.pp, layout=args.layout, micro_batch=args.micro_batch,
                     n_micro=args.micro_batches, lr=args.lr,
                     order=[int(v) for v in args.order.split(",")] if args.order else None, bucket_bytes=int(args.bucket_mib * (1 << 20)))

    def gather(obj):
        out = [None] * world
        dist.all_gather_object(out, obj)
        return out

    speeds, alpha_last = None, 0.0
    if args.parts == "uniform":
        tc.parts = partition.uniform(cfg.layers, tc.pp)
    elif args.parts.startswith("adapt"):
        from .layout import Layout
        coord = Layout(world, tc.tp, tc.pp, layout=tc.layout).coord(rank)
        if ":" in args.parts:
            speeds = [float(v) for v in args.parts.split(":", 1)[1].split(",")]
        else:
            by_pos, alpha_last = measure_speeds(cfg, tc, coord, gather)
            speeds = [by_pos[o] for o in (tc.order or range(tc.pp))]  # per stage
        tc.parts = partition.self_adapting(cfg.layers, speeds, alpha_last=alpha_last)
    else:
        tc.parts = [int(v) for v in args.parts.split(",")]
    log = (lambda s: None) if args.quiet else (lambda s: print(s, flush=True))
    tr = Trainer(cfg, tc)
    if rank == 0:
        log(f"uccl.parallel: world {world} tp {tc.tp} dp {tr.lay.dp} pp {tc.pp} layout {tc.layout} "
            f"parts {tc.parts} (speeds {speeds}, head {alpha_last:.2f} blocks) params {cfg.n_params()}")
        for kind, d in tr.describe().items():
            log(f"[{kind} group of rank 0] ranks {d['ranks']}\n{d['describe']}")
    reports = tr.run(args.steps, warmup=args.warmup, trace_step=0 if args.trace else None, log=log)
    mine = {"rank": rank, "coord": [tr.coord.tp, tr.coord.dp, tr.coord.pp],
            "step_s": [r["step_s"] for r in reports], "comm_s": [r["comm_s"] for r in reports],
            "wall": [r["wall"] for r in reports],
            "traffic": [r["traffic"] for r in reports], "trace": reports[0].get("trace") if reports else None}
    every = gather(mine)
    if rank == 0:
        step_s = [max(rr["step_s"][i] for rr in every) for i in range(len(reports))]
        cats = sorted({c for rr in every for d in rr["comm_s"] for c in d})
        comm = {c: statistics.median(max(rr["comm_s"][i].get(c, 0.0) for rr in every) for i in range(len(reports)))
                for c in cats}
        traffic = {}
        for rr in every:
            for step in rr["traffic"]:
                for kind, t in step.items():
                    k = traffic.setdefault(kind, {"bytes_sent": {}, "bytes_sent_by_level": {}})
                    for key in ("bytes_sent", "bytes_sent_by_level"):
                        for name, v in t.get(key, {}).items():
                            k[key][name] = k[key].get(name, 0) + v / len(reports)
        med = statistics.median(step_s)
        # per timed step: the wall-clock span over all ranks and each category's max over ranks
        wall = [[min(rr["wall"][i][0] for rr in every), max(rr["wall"][i][1] for rr in every)]
                for i in range(len(reports))]
        comm_all = [{c: max(rr["comm_s"][i].get(c, 0.0) for rr in every) for c in cats} for i in range(len(reports))]
        out = {"rank": 0, "world": world, "tp": tc.tp, "dp": tr.lay.dp, "pp": tc.pp, "layout": tc.layout,
               "parts": tc.parts, "speeds": speeds, "micro_batch": tc.micro_batch, "n_micro": tc.n_micro,
               "step_s": med, "step_s_all": step_s, "wall_all": wall, "comm_s_all": comm_all, "tokens_per_s": cfg.seq * tr.global_batch / med,
               "comm_s": comm, "traffic_per_step": traffic, "final_loss": reports[-1]["loss"] if reports else None}
        if args.trace:
            out["trace"] = write_chrome_trace(args.trace, [rr["trace"] or [] for rr in every],
                                              {"config": {k: v for k, v in out.items() if k != "step_s_all"}})
        print("RESULT " + json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
