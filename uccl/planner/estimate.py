"""Iteration-time model of one strategy: the rail-only paper's 1F1B critical path generalised to
unequal stages, with every group's communication priced by uccl's own cost model.

Per stage s (pipeline position order[s], layers parts[s], slowest device of the stage):
  c_s  = compute of one micro-batch (fwd + bwd) / t  +  TP: 4 all_gather + 4 reduce_scatter of
         the [s, b, h] activation per layer (sequence parallelism)
  q_s  = one activation message [s/t, b, h] from stage s to s+1 (point-to-point)
  e_s  = c_s + q_{s-1} + q_s           (a steady-state 1F1B slot with blocking paired transfers)
  T_pipe = sum_s c_s + 2 sum_s q_s + (m - 1) max_s e_s
  stage s's gradients are final sum_{j<s} (B_j + q_j) before the pipeline drains at stage 0;
  then DP reduce_scatter + all_gather of its parameters (ZeRO-1) and the TP all_reduce of the
  TP-replicated gradients:  T = max_s (T_pipe - sum_{j<s}(B_j + q_j) + dp_s) + loss all_reduce.
With measured timings (calibration.py, on the device kinds) c_s's compute is layers x the
measured block time (+ the head's on the last stage) instead of FLOPs / speed, and the optimizer
step (seconds per parameter of this rank's shard) is added after the drain, before the
all_gather. DP gradients go in buckets of model.bucket_bytes when set (one operation each: the
per-operation latency counts per bucket), issued asynchronously as the trainer does
('reduce_scatter_async' / 'all_gather_async': a calibration prices them as measured that way,
other cost functions as the plain operation).
Memory per device: weights + gradient + flat gradient buffer, optimizer state / d, and the
activations of min(p - s, m) micro-batches in flight.
The communication cost is injected (`Comm`): uccl.cost by default, a function in unit tests.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence

from ..parallel.layout import Coord, Layout
from .calibration import tp_in_place
from .spec import Cluster, ModelSpec


LOSS_AR_MAX_WORLD = 4096


class Comm:
    """Seconds of a collective over global ranks / of one message: memoised."""

    def __init__(self, coll: Callable[[str, float, Sequence[int]], float], p2p: Callable[[int, int, float], float],
                 where: Optional[Callable[[Sequence[int]], str]] = None,
                 algorithm: Optional[Callable[[str, float, Sequence[int]], str]] = None,
                 p2p_concurrent: bool = False, knows_async: bool = False):
        self._coll, self._p2p, self._where, self._algo = coll, p2p, where, algorithm
        self._p2p_concurrent = p2p_concurrent  # p2p(src, dst, nbytes, concurrent)
        self._knows_async = knows_async  # coll() prices '<op>_async' itself (calibrated_comm)
        self._cache: Dict[tuple, float] = {}

    def coll(self, collective: str, nbytes: float, ranks: Sequence[int]) -> float:
        """collective: 'all_gather', ... or '<op>_async' (issued in a batch with async_op and
        waited for later, as ZeRO's buckets: priced as '<op>' unless the function knows it)."""
        if len(ranks) <= 1 or nbytes <= 0:
            return 0.0
        if not self._knows_async and collective.endswith("_async"):
            collective = collective[:-len("_async")]
        key = (collective, float(nbytes), ranks if isinstance(ranks, range) else tuple(ranks))
        if key not in self._cache:
            self._cache[key] = float(self._coll(collective, float(nbytes), list(ranks)))
        return self._cache[key]

    def p2p(self, src: int, dst: int, nbytes: float, concurrent: int = 1) -> float:
        """One message; `concurrent`: how many such messages cross at the same time (the
        pipeline's t * d pairs at a stage boundary), for models that price shared links
        (calibrated_comm); a plain (src, dst, nbytes) function ignores it."""
        key = ("p2p", float(nbytes), (src, dst), concurrent)
        if key not in self._cache:
            if self._p2p_concurrent:
                self._cache[key] = float(self._p2p(src, dst, float(nbytes), concurrent))
            else:
                self._cache[key] = float(self._p2p(src, dst, float(nbytes)))
        return self._cache[key]

    def where(self, ranks: Sequence[int]) -> str:
        return self._where(ranks) if self._where else ""

    def algorithm(self, collective: str, nbytes: float, ranks: Sequence[int]) -> str:
        return self._algo(collective, nbytes, ranks) if self._algo and len(ranks) > 1 else ""

    @staticmethod
    def from_uccl(topo) -> "Comm":
        from uccl import cost

        def where(ranks):
            if len({topo.cluster_of(r) for r in ranks}) > 1:
                return "across clusters"
            if len({topo.host_of(r) for r in ranks}) > 1:
                return "inside a cluster"
            return "inside a host"

        return Comm(lambda c, n, r: cost.predict(topo, c, n, ranks=r),
                    lambda s, d, n: cost.predict_p2p(topo, s, d, n), where,
                    lambda c, n, r: cost.choose(topo, c, n, ranks=r)[0])


@dataclasses.dataclass
class Strategy:
    tp: int
    pp: int
    dp: int
    micro_batch: int
    n_micro: int
    layout: str
    parts: List[int]
    order: List[int]  # stage s runs on pipeline position order[s]

    def key(self):
        return (self.tp, self.pp, self.micro_batch, self.layout, tuple(self.parts), tuple(self.order))


@dataclasses.dataclass
class Estimate:
    time_s: float
    tokens_per_s: float
    memory_bytes: float          # the fullest device
    fits: bool
    breakdown: Dict[str, float]  # compute / tp / pp / dp seconds on the critical path (approx.)
    stage_s: List[float]         # c_s per micro-batch


def stage_ranks(lay: Layout, pos: int) -> List[int]:
    """The ranks of pipeline position pos (plain integers: 16k-rank worlds stay fast)."""
    t, d, p = lay.tp, lay.dp, lay.pp
    if lay.layout == "holmes":
        return list(range(pos * t * d, (pos + 1) * t * d))
    return [(dd * p + pos) * t + tt for dd in range(d) for tt in range(t)]


def _stage_kinds(cluster: Cluster, lay: Layout, pos: int):
    return list({id(k): k for k in (cluster.device_of_rank[r] for r in stage_ranks(lay, pos))}.values())


def _stage_devices(cluster: Cluster, lay: Layout, pos: int):
    kinds = _stage_kinds(cluster, lay, pos)
    return min(k.flops for k in kinds), min(k.memory for k in kinds)


def stage_compute(model: ModelSpec, kinds, t: int, b: int, layers: int, last: bool) -> float:
    """Seconds of forward + backward of one micro-batch on the stage's slowest device kind:
    measured block/head times where the kind has them for (t, b), else FLOPs / t / speed."""
    from .calibration import block_time
    worst = 0.0
    for k in kinds:
        blk = block_time(k.timings, "block", t, b) if k.timings else None
        head = block_time(k.timings, "head", t, b) if (k.timings and last) else 0.0
        if blk is not None and head is not None:
            sec = layers * blk + head
        else:
            sec = (layers * model.layer_flops(b) + (model.head_flops(b) if last else 0.0)) / t / k.flops
        worst = max(worst, sec)
    return worst


def bucketed(comm: "Comm", collective: str, nbytes: float, ranks, bucket: int) -> float:
    """A collective over nbytes sent in buckets of `bucket` bytes (0: one operation)."""
    if bucket <= 0 or nbytes <= bucket:
        return comm.coll(collective, nbytes, ranks)
    full, rest = divmod(nbytes, bucket)
    return int(full) * comm.coll(collective, bucket, ranks) + (comm.coll(collective, rest, ranks) if rest else 0.0)


def stage_speed(cluster: Cluster, lay: Layout, pos: int) -> float:
    return _stage_devices(cluster, lay, pos)[0]


def estimate(model: ModelSpec, cluster: Cluster, comm: Comm, st: Strategy) -> Estimate:
    lay = Layout(cluster.world, st.tp, st.pp, layout=st.layout)
    t, p, m, b = st.tp, st.pp, st.n_micro, st.micro_batch
    act = model.seq * b * model.hidden * model.act_bytes  # the full [s, b, h] vector
    c, q, bwd, dp_t, mem, caps, comp, tpc = [], [], [], [], [], [], [], []
    # Memory first: a plan that does not fit is not priced (pricing groups of thousands of
    # ranks is the expensive part of a search).
    for s in range(p):
        layers = st.parts[s]
        replicated = (model.embed_params() if s == 0 else 0) + (model.head_params() if s == p - 1 else 0)
        params = layers * model.layer_params() / t + replicated
        mem.append(params * (3 * model.bytes_per_param + model.optimizer_bytes / st.dp)
                   + min(p - s, m) * layers * model.act_bytes_per_layer(b, t))
        caps.append(_stage_devices(cluster, lay, st.order[s])[1])
    if any(m_ > cap for m_, cap in zip(mem, caps)):
        return Estimate(float("inf"), 0.0, max(mem), False, {}, [])
    reps = [lay.rank(Coord(0, 0, st.order[s])) for s in range(p)]
    for s in range(p):
        pos, layers = st.order[s], st.parts[s]
        kinds = _stage_kinds(cluster, lay, pos)
        groups = lay.groups_of(reps[s])
        compute = stage_compute(model, kinds, t, b, layers, s == p - 1)
        tp_comm = layers * 4 * (comm.coll("all_gather", act, groups["tp"]) + comm.coll("reduce_scatter", act,
                                                                                          groups["tp"]))
        if t > 1 and len({cluster.placement[r] for r in groups["tp"]}) == 1:
            measured = [tp_in_place(k.timings, t, b) for k in kinds]
            if measured and all(x is not None for x in measured):  # TP as measured in place
                tp_comm = layers * max(measured)
        c.append(compute + tp_comm)
        comp.append(compute)
        tpc.append(tp_comm)
        bwd.append(2.0 / 3.0 * compute + tp_comm / 2)
        q.append(comm.p2p(reps[s], reps[s + 1], act / t, concurrent=t * st.dp) if s + 1 < p else 0.0)
        replicated = (model.embed_params() if s == 0 else 0) + (model.head_params() if s == p - 1 else 0)
        params = layers * model.layer_params() / t + replicated
        nbytes = params * model.bytes_per_param
        bk = model.bucket_bytes
        opt = max((k.timings or {}).get("adam_per_param", 0.0) for k in kinds) * params / st.dp
        dp_t.append(bucketed(comm, "reduce_scatter_async", nbytes, groups["dp"], bk) + opt
                    + bucketed(comm, "all_gather_async", nbytes, groups["dp"], bk)
                    + comm.coll("all_reduce", replicated * model.bytes_per_param / st.dp, groups["tp"]))
    e = [c[s] + q[s] + (q[s - 1] if s else 0.0) for s in range(p)]
    t_pipe = sum(c) + 2 * sum(q) + (m - 1) * max(e)
    ends, drain = [], 0.0
    for s in range(p):
        ends.append(t_pipe - drain + dp_t[s])
        drain += bwd[s] + q[s]
    # The trainer's per-step loss all_reduce over the world: the same for every plan. Not priced
    # above LOSS_AR_MAX_WORLD ranks (uccl.cost takes ~27 s for one 16,384-rank group).
    loss_ar = comm.coll("all_reduce", 8, range(cluster.world)) if cluster.world <= LOSS_AR_MAX_WORLD else 0.0
    total = max(ends) + loss_ar
    crit = max(range(p), key=lambda s: e[s])
    breakdown = {"compute": sum(comp) + (m - 1) * comp[crit], "tp": sum(tpc) + (m - 1) * tpc[crit],
                 "pp": 2 * sum(q) + (m - 1) * (e[crit] - c[crit]), "dp": max(ends) - t_pipe}
    tokens = model.global_batch * model.seq
    return Estimate(total, tokens / total, max(mem), True, breakdown, c)
