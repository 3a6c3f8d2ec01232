"""1F1B pipeline schedule over send/recv on the PP group (Megatron's non-interleaved schedule).

Stage s of p runs min(p - s - 1, m) warm-up forwards, then alternates one forward and one
backward, then drains the remaining backwards. Paired transfers (send a result, receive the
next input or gradient) go as one batch_isend_irecv, so neighbours never wait on each other's
blocking send. Activation shapes are fixed ([s/t, micro_batch, hidden]), so receivers allocate
without a shape exchange. Stages may hold different numbers of layers.
"""
from __future__ import annotations

from typing import Callable, List, Optional

import torch
import torch.distributed as dist


class P2P:
    def __init__(self, group, ranks: List[int], stage: int, shape, dtype, rec=None):
        self.group, self.stage, self.p = group, stage, len(ranks)
        self.prev = ranks[stage - 1] if stage > 0 else None
        self.next = ranks[stage + 1] if stage + 1 < len(ranks) else None
        self.shape, self.dtype, self.rec = tuple(shape), dtype, rec

    def _run(self, name, sends, recv_from):
        """sends: [(tensor, peer)]; recv_from: peer or None. Returns the received tensor."""
        out = torch.empty(self.shape, dtype=self.dtype) if recv_from is not None else None
        ops = [dist.P2POp(dist.isend, t.contiguous(), peer, self.group) for t, peer in sends if peer is not None]
        if out is not None:
            ops.append(dist.P2POp(dist.irecv, out, recv_from, self.group))
        if not ops:
            return out
        span = self.rec.span("pp", name) if self.rec is not None else None
        if span:
            span.__enter__()
        try:
            for w in dist.batch_isend_irecv(ops):
                w.wait()
        finally:
            if span:
                span.__exit__(None, None, None)
        return out

    def recv_forward(self):
        return self._run("recv_forward", [], self.prev)

    def send_forward(self, y):
        self._run("send_forward", [(y, self.next)], None)

    def recv_backward(self):
        return self._run("recv_backward", [], self.next)

    def send_backward(self, g):
        if g is not None:
            self._run("send_backward", [(g, self.prev)], None)

    def send_forward_recv_backward(self, y):
        return self._run("send_forward_recv_backward", [(y, self.next)], self.next)

    def send_backward_recv_forward(self, g):
        return self._run("send_backward_recv_forward", [(g, self.prev)] if g is not None else [], self.prev)


def one_f_one_b(stage_fwd: Callable, n_micro: int, p2p: P2P, rec=None, before_last_backward: Optional[Callable] = None):
    """Runs one step of 1F1B. stage_fwd(j, x) -> output (activation, or loss on the last stage),
    with x the received activation (None on the first stage). Returns the sum of the losses
    (last stage) or 0.0."""
    p, s, last = p2p.p, p2p.stage, p2p.stage == p2p.p - 1
    warmup = min(p - s - 1, n_micro)
    remaining = n_micro - warmup
    inputs, outputs = [], []
    loss_sum = 0.0
    n_back = [0]

    def span(cat):
        import contextlib
        return rec.span(cat) if rec is not None else contextlib.nullcontext()

    def forward(j, x):
        nonlocal loss_sum
        if x is not None:
            x.requires_grad_()
        with span("forward"):
            y = stage_fwd(j, x)
        if last:
            loss_sum += float(y.detach())
        inputs.append(x)
        outputs.append(y)
        return y

    def backward(g):
        x, y = inputs.pop(0), outputs.pop(0)
        if n_back[0] == n_micro - 1 and before_last_backward is not None:
            before_last_backward()
        n_back[0] += 1
        with span("backward"):
            if last:
                y.backward()
            else:
                torch.autograd.backward(y, grad_tensors=g)
        return x.grad if x is not None else None

    for j in range(warmup):
        x = p2p.recv_forward() if s > 0 else None
        y = forward(j, x)
        if not last:
            p2p.send_forward(y.detach())
    x = p2p.recv_forward() if (remaining > 0 and s > 0) else None
    for i in range(remaining):
        y = forward(warmup + i, x)
        g = None if last else p2p.send_forward_recv_backward(y.detach())
        gx = backward(g)
        if i == remaining - 1:
            x = None
            if s > 0:
                p2p.send_backward(gx)
        else:
            x = p2p.send_backward_recv_forward(gx) if s > 0 else None
    for _ in range(warmup):
        g = p2p.recv_backward() if not last else None
        gx = backward(g)
        if s > 0:
            p2p.send_backward(gx)
    return loss_sum
