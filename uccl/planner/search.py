"""Strategy search: enumerate (t, p, d, micro-batch, layout, stage order, layers per stage) under
the rail-only paper's constraints and search depth-first with a bottleneck bound.

Constraints: t * p * d = N; t divides the devices of every host (TP stays inside a host), the
heads and the sequence; p <= layers; d divides the global batch and the micro-batch divides
the per-replica batch; every stage's memory fits its devices.
Bound at a (t, p, layout, b) node: T >= m * max_s c_s >= m * L / sum_s v_s (the slowest
stage is at least as slow as a perfectly balanced split), with v_s the layers per second of
position s's slowest device (t * FLOP/s / one layer's FLOPs, or measured: 1 / block time; an
order only permutes them). Nodes are expanded depth-first
(orders, then layer splits) in order of their bound; a node whose bound is not below the k-th
best time found is pruned with everything under it (and, the list being sorted, every later
node).
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
from typing import List, Optional

from ..parallel import partition
from ..parallel.layout import Layout
from .estimate import Comm, Estimate, Strategy, _stage_kinds, estimate, stage_compute
from .spec import Cluster, ModelSpec


def divisors(n: int) -> List[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


@dataclasses.dataclass
class SearchStats:
    nodes: int = 0
    evaluated: int = 0
    pruned: int = 0
    infeasible: int = 0


def candidate_orders(speeds_by_pos: List[float], max_perm: int = 4) -> List[List[int]]:
    p = len(speeds_by_pos)
    ident = list(range(p))
    if len(set(speeds_by_pos)) == 1:
        return [ident]  # homogeneous: every order is the same plan
    if p <= max_perm:
        return [list(o) for o in itertools.permutations(ident)]
    # HetHub: 1F1B stages by descending time (slow devices first), plus the two plain orders.
    slow_first = sorted(ident, key=lambda i: speeds_by_pos[i])
    return [ident, list(reversed(ident)), slow_first]


def head_in_layers(model: ModelSpec, kinds, t: int, b: int) -> float:
    """The head's cost in layers on the slowest of `kinds` (the self-adapting split's alpha)."""
    one = stage_compute(model, kinds, t, b, 1, False)
    return (stage_compute(model, kinds, t, b, 1, True) - one) / one


def candidate_parts(model: ModelSpec, speeds: List[float], mem_layers: Optional[List[int]], b: int,
                    alpha_last: Optional[float] = None) -> List[List[int]]:
    out = []
    try:
        out.append(partition.uniform(model.layers, len(speeds)))
    except partition.PartitionError:
        return []
    try:
        out.append(partition.self_adapting(model.layers, speeds,
                                           alpha_last=(model.head_flops(b) / model.layer_flops(b)
                                                       if alpha_last is None else alpha_last),
                                           mem_caps=mem_layers))
    except partition.PartitionError:
        pass
    return [list(x) for x in {tuple(x): 0 for x in out}]


def search(model: ModelSpec, cluster: Cluster, comm: Comm, top: int = 5, layouts=("holmes", "naive"),
           max_micro_batch: int = 8, prune: bool = True):
    """Returns ([(Estimate, Strategy)] best first, SearchStats)."""
    n = cluster.world
    stats = SearchStats()
    best: list = []  # max-heap by time (negated) of the top k
    counter = itertools.count()
    host_sizes = set(cluster.devices_per_host.values())
    tps = [t for t in divisors(min(host_sizes)) if all(h % t == 0 for h in host_sizes)
           and model.heads % t == 0 and model.seq % t == 0]

    kinds = list({id(k): k for k in cluster.device_of_rank}.values())
    alpha_by_tb = {(t, b): head_in_layers(model, kinds, t, b) for t in tps for b in range(1, max_micro_batch + 1)}

    def kth():
        return -best[0][0] if len(best) >= top else float("inf")

    # Level 1: the (t, p, layout, b) nodes with their bounds; children are visited depth-first,
    # most promising (lowest bound) first, so that good plans are found early and the bound
    # prunes the rest: once a node's bound reaches the k-th best time, so do all after it.
    nodes = []
    for t in tps:
        for p in divisors(n // t):
            if p > model.layers:
                continue
            d = n // (t * p)
            if model.global_batch % d:
                continue
            for layout in layouts if (p > 1 and d > 1) else layouts[:1]:
                lay = Layout(n, t, p, layout=layout)
                kinds_pos = [_stage_kinds(cluster, lay, pos) for pos in range(p)]
                for b in divisors(model.global_batch // d):
                    if b > max_micro_batch:
                        break
                    m = model.global_batch // (d * b)
                    # per position: layers per second of its slowest device (measured or FLOPs)
                    speeds_pos = [1.0 / stage_compute(model, kinds_pos[pos], t, b, 1, False) for pos in range(p)]
                    bound = m * model.layers / sum(speeds_pos)
                    nodes.append((bound, t, p, d, layout, b, m, speeds_pos))
    nodes.sort(key=lambda x: x[:4] + (x[4], x[5]))
    for i, (bound, t, p, d, layout, b, m, speeds_pos) in enumerate(nodes):
        stats.nodes += 1
        if prune and bound >= kth():
            stats.pruned += len(nodes) - i
            stats.nodes += len(nodes) - i - 1
            break
        for order in candidate_orders(speeds_pos):
            speeds = [speeds_pos[o] for o in order]
            for parts in candidate_parts(model, speeds, None, b, alpha_by_tb[(t, b)]):
                st = Strategy(t, p, d, b, m, layout, parts, order)
                est = estimate(model, cluster, comm, st)
                stats.evaluated += 1
                if not est.fits:
                    stats.infeasible += 1
                    continue
                if est.time_s < kth():
                    heapq.heappush(best, (-est.time_s, next(counter), est, st))
                    if len(best) > top:
                        heapq.heappop(best)
    ranked = sorted(best, key=lambda x: -x[0])
    return [(e, s) for _, _, e, s in ranked], stats


def describe_groups(cluster: Cluster, comm: Comm, model: ModelSpec, st: Strategy) -> dict:
    """Rank 0's groups: members' span and the algorithm uccl would pick for their main op."""
    lay = Layout(cluster.world, st.tp, st.pp, layout=st.layout)
    g = lay.groups_of(0)
    act = model.seq * st.micro_batch * model.hidden * model.act_bytes
    grads = st.parts[0] * model.layer_params() / st.tp * model.bytes_per_param
    out = {}
    for kind, coll, nbytes in (("tp", "all_gather", act), ("dp", "reduce_scatter", grads), ("pp", "p2p", act / st.tp)):
        ranks = g[kind]
        out[kind] = {"size": len(ranks), "where": comm.where(ranks) if len(ranks) > 1 else "-",
                     "algorithm": comm.algorithm(coll, nbytes, ranks) if coll != "p2p" else "send/recv"}
    return out


def plan_dict(est: Estimate, st: Strategy, groups: Optional[dict] = None) -> dict:
    d = {"tp": st.tp, "pp": st.pp, "dp": st.dp, "micro_batch": st.micro_batch, "n_micro": st.n_micro,
         "layout": st.layout, "parts": st.parts, "order": st.order, "predicted_s": est.time_s,
         "tokens_per_s": est.tokens_per_s, "memory_gib": est.memory_bytes / (1 << 30),
         "breakdown_s": est.breakdown}
    if groups:
        d["groups"] = groups
    return d
