"""ZeRO-1 distributed optimizer over the DP group (Adam, elementwise, so sharding keeps the math).

Parameters live in flat buckets (in backward order, at most `bucket_bytes`, one kind per
bucket: TP-replicated or TP-sharded). During the last micro-batch's backward, a bucket whose
gradients are all final is copied to a flat buffer and reduce-scattered (sum) over the DP group
asynchronously, while backward goes on. finish(): wait for them, all-reduce the shards of
TP-replicated parameters over the TP group (their gradients are partial under sequence
parallelism), Adam on this rank's fp shard of each bucket, then all-gather the updated shards
asynchronously; a forward pre-hook on each module waits for its buckets, so the gathers of
later layers overlap with the next forward of earlier ones.
"""
from __future__ import annotations

import contextlib
from typing import List

import torch
import torch.distributed as dist


class _Bucket:
    def __init__(self, params: List[torch.nn.Parameter], dp: int, dp_rank: int, replicated: bool):
        self.params, self.replicated = params, replicated
        n = sum(p.numel() for p in params)
        self.shard = -(-n // dp)
        self.padded = self.shard * dp
        dt = params[0].dtype
        self.flat = torch.zeros(self.padded, dtype=dt)
        self.grad = torch.zeros(self.padded, dtype=dt)
        self.offsets, off = [], 0
        for p in params:
            self.flat[off:off + p.numel()].copy_(p.detach().reshape(-1))
            p.data = self.flat[off:off + p.numel()].view_as(p)
            self.offsets.append(off)
            off += p.numel()
        lo = dp_rank * self.shard
        self.master = torch.nn.Parameter(self.flat[lo:lo + self.shard].clone())
        self.grad_shard = torch.zeros(self.shard, dtype=dt)
        self.ready = 0
        self.rs_work = self.ag_work = self.ag_src = None


class ZeroAdam:
    def __init__(self, params, dp_group, dp: int, dp_rank: int, tp_group=None, tp: int = 1, rec=None,
                 bucket_bytes: int = 1 << 20, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.dp_group, self.dp, self.tp_group, self.tp, self.rec = dp_group, dp, tp_group, tp, rec
        params = [p for p in params if p.requires_grad]
        self.buckets: List[_Bucket] = []
        cur, cur_bytes, cur_kind = [], 0, None
        for p in reversed(params):  # backward produces gradients roughly in reverse order
            kind = bool(getattr(p, "tp_replicated", False))
            if cur and (kind != cur_kind or cur_bytes + p.numel() * p.element_size() > bucket_bytes):
                self.buckets.append(_Bucket(cur, dp, dp_rank, cur_kind))
                cur, cur_bytes = [], 0
            cur.append(p)
            cur_kind = kind
            cur_bytes += p.numel() * p.element_size()
        if cur:
            self.buckets.append(_Bucket(cur, dp, dp_rank, cur_kind))
        self.bucket_of = {}
        for b in self.buckets:
            for p in b.params:
                self.bucket_of[p] = b
                p.register_post_accumulate_grad_hook(self._grad_ready)
        self.opt = torch.optim.Adam([b.master for b in self.buckets], lr=lr, betas=betas, eps=eps,
                                    weight_decay=weight_decay, foreach=False)
        self.final_backward = False

    def _span(self, name):
        return self.rec.span("dp", name) if self.rec is not None else contextlib.nullcontext()

    def attach(self, root: torch.nn.Module) -> None:
        """Forward pre-hooks: a module waits for its parameters' all-gather before running.
        Parameters of modules that are never called (plain holders without forward) are waited
        for by the root module."""
        by_module = {}
        for m in root.modules():
            runs = type(m).forward is not torch.nn.Module.forward
            for p in m.parameters(recurse=False):
                if p in self.bucket_of:
                    by_module.setdefault(m if runs else root, []).append(self.bucket_of[p])
        for m, bs in by_module.items():
            bs = list({id(b): b for b in bs}.values())
            m.register_forward_pre_hook(lambda mod, args, bs=bs: self._wait_gathers(bs))

    def _wait_gathers(self, buckets):
        for b in buckets:
            if b.ag_work is not None:
                with self._span("all_gather_wait"):
                    b.ag_work.wait()
                b.ag_work = b.ag_src = None

    def _grad_ready(self, p):
        if not self.final_backward:
            return
        b = self.bucket_of[p]
        b.ready += 1
        if b.ready == len(b.params):
            self._launch(b)

    def _launch(self, b: _Bucket) -> None:
        for p, off in zip(b.params, b.offsets):
            b.grad[off:off + p.numel()].copy_(p.grad.reshape(-1))
            p.grad = None
        if self.dp == 1:
            b.grad_shard.copy_(b.grad)
            return
        with self._span("reduce_scatter_issue"):
            b.rs_work = dist.reduce_scatter_tensor(b.grad_shard, b.grad, group=self.dp_group, async_op=True)

    def step(self) -> None:
        """After the last micro-batch's backward: finish the gradients, update, re-gather."""
        self.final_backward = False
        for b in self.buckets:
            if b.ready != len(b.params):
                missing = [getattr(p, 'full_name', '?') for p in b.params][:3]
                raise RuntimeError(f"uccl.parallel: bucket gradients incomplete ({b.ready}/{len(b.params)}), "
                                   f"e.g. {missing}: was the last backward run with final_backward set?")
            b.ready = 0
            if b.rs_work is not None:
                with self._span("reduce_scatter_wait"):
                    b.rs_work.wait()
                b.rs_work = None
            if b.replicated and self.tp > 1:
                with (self.rec.span("tp", "replicated_grad_all_reduce") if self.rec else contextlib.nullcontext()):
                    dist.all_reduce(b.grad_shard, group=self.tp_group)
            b.master.grad = b.grad_shard
        self.opt.step()
        for b in self.buckets:
            if self.dp == 1:
                b.flat.copy_(b.master.detach())
                continue
            b.ag_src = b.master.detach().clone()  # kept until the gather finished (async input)
            with self._span("all_gather_issue"):
                b.ag_work = dist.all_gather_into_tensor(b.flat, b.ag_src, group=self.dp_group, async_op=True)

    def wait_all(self) -> None:
        self._wait_gathers(self.buckets)
