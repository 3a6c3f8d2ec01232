"""Self-adapting pipeline partition (after Holmes, eq. 4/5): layers per stage in proportion to the
measured speed of the stage's devices, with a memory cap per device. Pure Python.

A stage's time is (layers + extra) / speed, where `extra` is the work the stage does besides
its transformer layers, in layer units: alpha_first for the first stage (embedding), alpha_last
for the last (head and loss). Equal stage times give
    n_i = v_i / sum(v) * (L + sum(extra)) - extra_i            (eq. 4)
rounded by largest remainder, at least one layer each, and at most mem_i / mem_per_layer
(eq. 5: what does not fit moves to the stages with memory to spare, fastest first).
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence


class PartitionError(ValueError):
    pass


def uniform(n_layers: int, stages: int) -> List[int]:
    if stages < 1 or n_layers < stages:
        raise PartitionError(f"cannot split {n_layers} layers into {stages} stages of at least one layer")
    base, extra = divmod(n_layers, stages)
    return [base + (1 if i < extra else 0) for i in range(stages)]


def self_adapting(n_layers: int, speeds: Sequence[float], alpha_first: float = 0.0, alpha_last: float = 0.0,
                  mem_caps: Optional[Sequence[int]] = None) -> List[int]:
    """Layers per stage. speeds: relative speed of each stage's devices (layers per second, any
    unit); mem_caps: the most layers each stage's device memory holds (None: unlimited)."""
    p = len(speeds)
    if p < 1 or n_layers < p:
        raise PartitionError(f"cannot split {n_layers} layers into {p} stages of at least one layer")
    if any(not (v > 0) for v in speeds):
        raise PartitionError(f"stage speeds must be positive, got {list(speeds)}")
    caps = list(mem_caps) if mem_caps is not None else [n_layers] * p
    if len(caps) != p:
        raise PartitionError(f"{len(caps)} memory caps for {p} stages")
    if any(c < 1 for c in caps) or sum(caps) < n_layers:
        raise PartitionError(f"the stages' memory holds {sum(caps)} layers (caps {caps}), the model has {n_layers}")
    extra = [0.0] * p
    extra[0] += alpha_first
    extra[-1] += alpha_last
    total = sum(speeds)
    ideal = [v / total * (n_layers + sum(extra)) - e for v, e in zip(speeds, extra)]
    ideal = [min(max(x, 1.0), c) for x, c in zip(ideal, caps)]
    n = [max(1, min(int(math.floor(x)), c)) for x, c in zip(ideal, caps)]
    # Largest remainder, then memory caps: hand out / take back one layer at a time where the
    # resulting stage time stays smallest (add) or is largest (remove).
    def t(i, k):
        return (k + extra[i]) / speeds[i]
    while sum(n) < n_layers:
        cand = [i for i in range(p) if n[i] < caps[i]]
        i = min(cand, key=lambda i: (t(i, n[i] + 1), -(ideal[i] - n[i])))
        n[i] += 1
    while sum(n) > n_layers:
        cand = [i for i in range(p) if n[i] > 1]
        i = max(cand, key=lambda i: (t(i, n[i]), n[i] - ideal[i]))
        n[i] -= 1
    return n


def stage_times(parts: Sequence[int], speeds: Sequence[float], alpha_first: float = 0.0,
                alpha_last: float = 0.0) -> List[float]:
    extra = [0.0] * len(parts)
    extra[0] += alpha_first
    extra[-1] += alpha_last
    return [(k + e) / v for k, e, v in zip(parts, extra, speeds)]
