"""A small GPT for uccl.parallel: one pipeline stage of it, tensor-parallel over a TP group.

Layout of activations: [sequence, batch, hidden]. With TP size t > 1 the model runs Megatron's
sequence parallelism: outside attention/MLP the sequence is split over the TP ranks
([s/t, b, h]); before a column-parallel linear it is all-gathered, after a row-parallel linear
reduce-scattered (autograd: the reverse op in backward). Parameters living in the
sequence-split region (embeddings, layer norms, row-parallel biases, head) are replicated over
TP and get partial gradients: the optimizer all-reduces them over the TP group
(`param.tp_replicated`).

Every parameter is a slice of one deterministic full-model initialisation (`full_init`), so a
single-process model (t = p = 1, all layers) is the numerical reference of any (t, p, d).
Each parameter carries `full_name` and `tp_split` (dim or None) so tests can compare shards.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class GPTConfig:
    vocab: int = 512
    hidden: int = 64
    heads: int = 4
    layers: int = 4
    seq: int = 32
    dtype: str = "float32"

    @property
    def torch_dtype(self):
        return getattr(torch, self.dtype)

    def check(self, tp: int) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"uccl.parallel: hidden {self.hidden} not divisible by heads {self.heads}")
        if self.heads % tp:
            raise ValueError(f"uccl.parallel: heads {self.heads} not divisible by tp {tp}")
        if self.seq % tp:
            raise ValueError(f"uccl.parallel: sequence {self.seq} not divisible by tp {tp} (sequence parallelism)")

    def params_per_layer(self) -> int:
        h = self.hidden
        return 12 * h * h + 13 * h

    def n_params(self) -> int:
        h = self.hidden
        return self.layers * self.params_per_layer() + (self.vocab + self.seq) * h + 2 * h + self.vocab * h


def full_init(cfg: GPTConfig, seed: int = 0) -> Dict[str, torch.Tensor]:
    """The full model's parameters by name, identical on every rank for the same seed."""
    g = torch.Generator().manual_seed(seed)
    h, dt = cfg.hidden, cfg.torch_dtype

    def normal(*shape, std=0.02):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dt)

    p = {"emb.tok": normal(cfg.vocab, h), "emb.pos": normal(cfg.seq, h)}
    out_std = 0.02 / math.sqrt(2 * cfg.layers)
    for i in range(cfg.layers):
        b = f"blocks.{i}."
        for ln in ("ln1", "ln2"):
            p[b + ln + ".w"] = torch.ones(h, dtype=dt)
            p[b + ln + ".b"] = torch.zeros(h, dtype=dt)
        for w in ("wq", "wk", "wv"):
            p[b + "attn." + w] = normal(h, h)
            p[b + "attn.b" + w[1]] = normal(h, std=0.01)
        p[b + "attn.wo"] = normal(h, h, std=out_std)
        p[b + "attn.bo"] = normal(h, std=0.01)
        p[b + "mlp.w1"] = normal(4 * h, h)
        p[b + "mlp.b1"] = normal(4 * h, std=0.01)
        p[b + "mlp.w2"] = normal(h, 4 * h, std=out_std)
        p[b + "mlp.b2"] = normal(h, std=0.01)
    p["head.ln.w"] = torch.ones(h, dtype=dt)
    p["head.ln.b"] = torch.zeros(h, dtype=dt)
    p["head.w"] = normal(cfg.vocab, h)
    return p


class TPComm:
    """The TP group's sequence-parallel ops; identity when t == 1. `rec` times them ("tp")."""

    def __init__(self, group=None, size: int = 1, rank: int = 0, rec=None):
        self.group, self.size, self.rank, self.rec = group, size, rank, rec

    def _timed(self, name, fn):
        if self.rec is None:
            return fn()
        with self.rec.span("tp", name):
            return fn()

    def all_gather_seq(self, x):
        import torch.distributed as dist
        out = x.new_empty((x.shape[0] * self.size,) + tuple(x.shape[1:]))
        self._timed("all_gather", lambda: dist.all_gather_into_tensor(out, x.contiguous(), group=self.group))
        return out

    def reduce_scatter_seq(self, x):
        import torch.distributed as dist
        out = x.new_empty((x.shape[0] // self.size,) + tuple(x.shape[1:]))
        self._timed("reduce_scatter", lambda: dist.reduce_scatter_tensor(out, x.contiguous(), group=self.group))
        return out


class _GatherSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return comm.all_gather_seq(x)

    @staticmethod
    def backward(ctx, g):
        return ctx.comm.reduce_scatter_seq(g), None


class _ScatterSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return comm.reduce_scatter_seq(x)

    @staticmethod
    def backward(ctx, g):
        return ctx.comm.all_gather_seq(g), None


def gather_seq(x, comm: TPComm):
    return x if comm.size == 1 else _GatherSeq.apply(x, comm)


def scatter_seq(x, comm: TPComm):
    return x if comm.size == 1 else _ScatterSeq.apply(x, comm)


class _Shards(nn.Module):
    """Holds parameters sliced out of the full initialisation."""

    def __init__(self, full, prefix, comm: TPComm):
        super().__init__()
        self._full, self._prefix, self._comm = full, prefix, comm

    def take(self, attr, name, split: Optional[int] = None, chunks=None):
        """split: dim sharded over TP (None: replicated over TP, partial grads under SP)."""
        t = self._full[self._prefix + name]
        if split is not None and self._comm.size > 1:
            t = t.chunk(self._comm.size, dim=split)[self._comm.rank]
        p = nn.Parameter(t.clone())
        p.full_name, p.tp_split = self._prefix + name, split
        p.tp_replicated = split is None and self._comm.size > 1
        self.register_parameter(attr, p)
        return p


class Block(_Shards):
    def __init__(self, cfg: GPTConfig, i: int, full, comm: TPComm):
        super().__init__(full, f"blocks.{i}.", comm)
        self.cfg, self.comm = cfg, comm
        self.local_heads = cfg.heads // comm.size
        for ln in ("ln1", "ln2"):
            self.take(ln + "_w", ln + ".w")
            self.take(ln + "_b", ln + ".b")
        for w in ("q", "k", "v"):
            self.take("w" + w, "attn.w" + w, split=0)  # column parallel: output features
            self.take("b" + w, "attn.b" + w, split=0)
        self.take("wo", "attn.wo", split=1)  # row parallel: input features
        self.take("bo", "attn.bo")
        self.take("w1", "mlp.w1", split=0)
        self.take("b1", "mlp.b1", split=0)
        self.take("w2", "mlp.w2", split=1)
        self.take("b2", "mlp.b2")

    def forward(self, x):  # x: [s/t, b, h]
        h = self.cfg.hidden
        y = gather_seq(F.layer_norm(x, (h,), self.ln1_w, self.ln1_b), self.comm)  # [s, b, h]
        s, b = y.shape[0], y.shape[1]
        hd = h // self.cfg.heads

        def heads(t):
            return t.view(s, b, self.local_heads, hd).permute(1, 2, 0, 3)  # [b, nh, s, hd]

        q, k, v = (heads(F.linear(y, w, bb)) for w, bb in ((self.wq, self.bq), (self.wk, self.bk), (self.wv, self.bv)))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [b, nh, s, hd]
        a = a.permute(2, 0, 1, 3).reshape(s, b, self.local_heads * hd)
        x = x + scatter_seq(F.linear(a, self.wo), self.comm) + self.bo
        y = gather_seq(F.layer_norm(x, (h,), self.ln2_w, self.ln2_b), self.comm)
        y = F.linear(F.gelu(F.linear(y, self.w1, self.b1)), self.w2)
        return x + scatter_seq(y, self.comm) + self.b2


class Stage(nn.Module):
    """Layers [first_layer, first_layer + n_layers) of the GPT; the first stage embeds tokens,
    the last one returns the loss summed over its tokens and divided by `loss_tokens`."""

    def __init__(self, cfg: GPTConfig, first_layer: int, n_layers: int, full, comm: TPComm, is_first: bool,
                 is_last: bool):
        super().__init__()
        cfg.check(comm.size)
        self.cfg, self.comm, self.is_first, self.is_last = cfg, comm, is_first, is_last
        self.emb = self.head = None
        if is_first:
            self.emb = _Shards(full, "emb.", comm)
            self.emb.take("tok", "tok")
            self.emb.take("pos", "pos")
        self.blocks = nn.ModuleList(Block(cfg, i, full, comm) for i in range(first_layer, first_layer + n_layers))
        if is_last:
            self.head = _Shards(full, "head.", comm)
            self.head.take("ln_w", "ln.w")
            self.head.take("ln_b", "ln.b")
            self.head.take("w", "w")

    def local_seq(self, t):
        """This TP rank's slice of a [s, b] token tensor (sequence parallelism)."""
        n = t.shape[0] // self.comm.size
        return t[self.comm.rank * n:(self.comm.rank + 1) * n]

    def forward(self, x, targets=None, loss_tokens: int = 1):
        if self.is_first:  # x: tokens [s, b]
            pos = self.local_seq(torch.arange(x.shape[0]))
            x = F.embedding(self.local_seq(x), self.emb.tok) + self.emb.pos[pos].unsqueeze(1)
        for blk in self.blocks:
            x = blk(x)
        if not self.is_last:
            return x
        y = F.layer_norm(x, (self.cfg.hidden,), self.head.ln_w, self.head.ln_b)
        logits = F.linear(y, self.head.w)
        tgt = self.local_seq(targets)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                               reduction="sum") / loss_tokens


def reference_slice(p: torch.nn.Parameter, full: Dict[str, torch.Tensor], tp: int, tp_rank: int):
    """The part of the full (reference) tensor that the shard `p` holds."""
    t = full[p.full_name]
    if p.tp_split is not None and tp > 1:
        t = t.chunk(tp, dim=p.tp_split)[tp_rank]
    return t
