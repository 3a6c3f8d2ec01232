"""The trainer: groups from the layout, one GPT stage per rank, 1F1B + ZeRO-1, per-step reports.

    torchrun --nproc-per-node 4 -m uccl.parallel.train --tp 2 --pp 2 --steps 5

Every group is created with backend "uccl" and no transport options: uccl's topology decides
each group's transport and algorithm (DP inside a cluster on its fabric, PP across).
"""
from __future__ import annotations

import dataclasses
import time
from typing import List, Optional

import torch
import torch.distributed as dist

from . import partition as part
from .layout import Layout, check_partition
from .model import GPTConfig, Stage, TPComm, full_init
from .pipeline import P2P, one_f_one_b
from .report import StepRecorder, traffic_delta
from .zero import ZeroAdam


@dataclasses.dataclass
class TrainConfig:
    tp: int = 1
    pp: int = 1
    layout: str = "holmes"
    parts: Optional[List[int]] = None  # layers per stage (None: uniform)
    order: Optional[List[int]] = None  # stage s runs on pipeline position order[s] (None: s)
    micro_batch: int = 2
    n_micro: int = 4
    lr: float = 1e-3
    seed: int = 0
    bucket_bytes: int = 1 << 20


def batch(cfg: GPTConfig, step: int, n_seq: int, seed: int = 0) -> torch.Tensor:
    """Synthetic tokens [seq + 1, n_seq] for a step, the same on every rank."""
    g = torch.Generator().manual_seed(seed * 100003 + step)
    return torch.randint(0, cfg.vocab, (cfg.seq + 1, n_seq), generator=g)


def make_groups(lay: Layout, rank: int):
    """Creates every TP, DP and PP group (all ranks take part in each new_group call, in the same
    order); returns this rank's {kind: (group or None, ranks)}. Size-1 kinds make no group."""
    mine = lay.groups_of(rank)
    out = {}
    for kind, groups in (("tp", lay.tp_groups()), ("dp", lay.dp_groups()), ("pp", lay.pp_groups())):
        out[kind] = (None, mine[kind])
        if len(groups[0]) == 1:
            continue
        for ranks in groups:
            g = dist.new_group(ranks, backend="uccl")
            if rank in ranks:
                out[kind] = (g, ranks)
    return out


def backend_of(group):
    return group._get_backend(torch.device("cpu")) if group is not None else None


class Trainer:
    def __init__(self, cfg: GPTConfig, tc: TrainConfig, rec: Optional[StepRecorder] = None):
        self.cfg, self.tc = cfg, tc
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.lay = Layout(self.world, tc.tp, tc.pp, layout=tc.layout)
        self.coord = self.lay.coord(self.rank)
        self.rec = rec or StepRecorder(self.rank)
        self.groups = make_groups(self.lay, self.rank)
        self.parts = check_partition(tc.parts or part.uniform(cfg.layers, tc.pp), cfg.layers, tc.pp)
        order = tc.order or list(range(tc.pp))
        if sorted(order) != list(range(tc.pp)):
            raise ValueError(f"uccl.parallel: stage order {order} is not a permutation of 0..{tc.pp - 1}")
        s = self.stage_index = order.index(self.coord.pp)
        pp_group, pp_ranks = self.groups["pp"]
        self.groups["pp"] = (pp_group, [pp_ranks[order[i]] for i in range(tc.pp)])  # in stage order
        tp_group = self.groups["tp"][0]
        self.tpc = TPComm(tp_group, tc.tp, self.coord.tp, self.rec)
        full = full_init(cfg, tc.seed)
        self.stage = Stage(cfg, sum(self.parts[:s]), self.parts[s], full, self.tpc, s == 0, s == tc.pp - 1)
        del full
        self.opt = ZeroAdam(self.stage.parameters(), self.groups["dp"][0], self.lay.dp, self.coord.dp, tp_group,
                            tc.tp, self.rec, tc.bucket_bytes, lr=tc.lr)
        self.opt.attach(self.stage)
        shape = (cfg.seq // tc.tp, tc.micro_batch, cfg.hidden)
        self.p2p = P2P(self.groups["pp"][0], self.groups["pp"][1], s, shape, cfg.torch_dtype, self.rec)

    @property
    def global_batch(self) -> int:
        return self.lay.dp * self.tc.n_micro * self.tc.micro_batch

    def describe(self) -> dict:
        """The groups: ranks and uccl's description (levels, transport per peer)."""
        out = {}
        for kind, (g, ranks) in self.groups.items():
            b = backend_of(g)
            out[kind] = {"ranks": ranks, "describe": b.describe() if b is not None else "(size 1: no group)"}
        return out

    def traffic(self) -> dict:
        return {k: backend_of(g).traffic() for k, (g, _) in self.groups.items() if g is not None}

    def step(self, step: int) -> float:
        """One training step; returns the global mean loss (every rank)."""
        cfg, tc = self.cfg, self.tc
        tokens = batch(cfg, step, self.global_batch, tc.seed)
        per_dp = tc.n_micro * tc.micro_batch
        mine = tokens[:, self.coord.dp * per_dp:(self.coord.dp + 1) * per_dp]
        loss_tokens = cfg.seq * self.global_batch

        def fwd(j, x):
            cols = mine[:, j * tc.micro_batch:(j + 1) * tc.micro_batch]
            inp = cols[:-1] if self.stage.is_first else x
            return self.stage(inp, cols[1:], loss_tokens)

        def arm():
            self.opt.final_backward = True

        loss_sum = one_f_one_b(fwd, tc.n_micro, self.p2p, self.rec, before_last_backward=arm)
        self.opt.step()
        t = torch.tensor([loss_sum], dtype=torch.float64)
        with self.rec.span("report", "loss_all_reduce"):
            dist.all_reduce(t)
        return float(t.item())  # TP ranks hold disjoint sequence chunks, DP ranks disjoint sequences

    def run(self, steps: int, warmup: int = 1, trace_step: Optional[int] = None, log=print):
        """Trains; returns per-step reports (after `warmup` untimed steps) for this rank."""
        reports = []
        for i in range(warmup + steps):
            self.rec.reset(trace=(trace_step is not None and i == warmup + trace_step))
            before = self.traffic()
            wall0, t0 = time.time(), time.perf_counter()
            loss = self.step(i)
            dt = time.perf_counter() - t0
            r = {"step": i, "loss": loss, "step_s": dt, "wall": [wall0, wall0 + dt],
                 "tokens_per_s": self.cfg.seq * self.global_batch / dt,
                 "comm_s": self.rec.snapshot(), "traffic": {k: traffic_delta(before[k], v)
                                                             for k, v in self.traffic().items()}}
            if self.rec.tracing:
                r["trace"] = list(self.rec.events)
            if i >= warmup:
                reports.append(r)
            if log and self.rank == 0:
                from .report import format_step
                log(("warmup " if i < warmup else "") + format_step(i, r))
        self.opt.wait_all()
        return reports


def reference(cfg: GPTConfig, tc: TrainConfig, global_batch: int, steps: int):
    """The same model and data in one process (t = p = d = 1, one micro-batch): the losses per
    step and the final parameters by full name."""
    st = Stage(cfg, 0, cfg.layers, full_init(cfg, tc.seed), TPComm(), True, True)
    opt = torch.optim.Adam(st.parameters(), lr=tc.lr, foreach=False)
    losses = []
    for i in range(steps):
        tok = batch(cfg, i, global_batch, tc.seed)
        loss = st(tok[:-1], tok[1:], cfg.seq * global_batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    return losses, {p.full_name: p.detach().clone() for p in st.parameters()}
