"""Measured costs for the planner: communication and compute as they really cost on the ranks.

Why: on the testbed a "device" is a CPU quota (cgroup), and communication there is CPU work
under the same quota (TCP in the kernel, uccl's progress thread, copies): a 64 KiB all_gather
between two ranks of one host costs milliseconds, not the microseconds its links' rates give.
Pricing from link rates alone put the planner's predictions 22-71% below the measured
iteration times (uccl/parallel/RESULTS.md). So the planner can be given a calibration, measured
by `uccl.planner.calibrate` on the real ranks, under their quotas, all ranks at once:

  communication, per group shape (size, hosts spanned, clusters spanned) and operation:
      t_cpu(n) = alpha + beta * n          (least squares of the relative error, a few sizes)
      priced:    t(n) = max(t_link(n), t_cpu(n))
  i.e. per operation the slower of what the links allow (uccl.cost, the topology's rates) and
  what the CPU share allows; alpha is the per-operation latency (dominant for small messages).
  A pipeline's messages are priced as measured between units of compute (p2p_in_place) where
  the calibration has them: under a quota a message that follows compute waits for wake-ups
  that back-to-back messages do not.
  A calibration measured at quota q0 is used at quota q scaled by q0 / q (time of CPU-bound
  work is inversely proportional to the CPU share: an approximation; measured, half the share
  cost 1.69x, not 2x: uccl/parallel/RESULTS.md). A calibration with quota 0 (measured under
  several shares, or none) is used as measured.

  links, per level of the topology file (two ranks of a host, two hosts of a cluster, two
  clusters): the rate uccl-perf's sendrecv reaches between one pair (Gbit/s, the slope of two
  message sizes), which replaces the file's declared rate (with_measured_links)

  compute, per device kind, measured with the model's own modules (shapes of a TP shard):
      block[t,b]  seconds of forward + backward of one transformer block, micro-batch b
      head[t,b]   the same for the final layer norm, the LM head and the loss
      block_tp[t,b]  the block with its real TP group's sequence-parallel operations, all TP
                  groups at once (TP groups inside one host): block_tp - block prices TP in a
                  step, where each blocking operation waits and wakes between compute under
                  the quota; operations timed back to back cost 30-50% less there
      adam_per_param  seconds per parameter of the optimizer step (copies, Adam, the clone
                      that the ZeRO all_gather sends)

A Calibration is a JSON document (cached by the caller, keyed by what it was measured for:
the model's shapes, the quotas, the bed). This module is pure Python (no torch).
"""
from __future__ import annotations

import json
import math
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
# ZeRO's buckets: a batch of these issued with async_op, then waited for (uccl's progress
# thread drives them while the caller computes); measured so, they cost up to 3x the same
# operations issued one by one on the testbed (uccl/parallel/RESULTS.md)
ASYNC_COLLECTIVES = ("reduce_scatter_async", "all_gather_async")


def group_shape(placement: Sequence[str], cluster_of_host: Dict[str, str], ranks: Iterable[int]) -> str:
    """'n<size>h<hosts>c<clusters>': what a group's members span (the calibration's key)."""
    ranks = list(ranks)
    hosts = {placement[r] for r in ranks}
    return f"n{len(ranks)}h{len(hosts)}c{len({cluster_of_host[h] for h in hosts})}"


def fit_linear(sizes: Sequence[float], times: Sequence[float]) -> Tuple[float, float]:
    """alpha + beta * n by least squares on the relative error (weights 1 / t^2: the sizes span
    four decades, and a plain fit lets one noisy large-message point decide the small messages'
    latency), both clamped at >= 0 (a negative slope from noisy points means no measurable
    per-byte cost: alpha is then the weighted mean)."""
    n = len(sizes)
    if n == 0 or n != len(times):
        raise ValueError(f"fit_linear: need as many times as sizes, got {len(sizes)} and {len(times)}")
    if any(t <= 0 for t in times):
        raise ValueError(f"fit_linear: times must be positive, got {list(times)}")
    w = [1.0 / (t * t) for t in times]
    sw = sum(w)
    swx = sum(wi * x for wi, x in zip(w, sizes))
    swy = sum(wi * y for wi, y in zip(w, times))
    swxx = sum(wi * x * x for wi, x in zip(w, sizes))
    swxy = sum(wi * x * y for wi, x, y in zip(w, sizes, times))
    det = sw * swxx - swx * swx
    beta = (sw * swxy - swx * swy) / det if n > 1 and det > 0 else 0.0
    if beta <= 0:
        return swy / sw, 0.0
    alpha = (swy - beta * swx) / sw
    if alpha < 0:  # through the origin instead
        return 0.0, swxy / swxx
    return alpha, beta


class Calibration:
    """Fitted costs from a calibration document (see calibrate.py for how it is measured)."""

    def __init__(self, doc: dict):
        self.doc = doc
        self.quota = float(doc.get("quota", 0.0))  # cores per rank it was measured at (0: none)
        self.comm: Dict[str, Dict[str, Tuple[float, float]]] = {}
        for shape, ops in doc.get("comm", {}).items():
            for op, pts in ops.items():
                sizes = [float(s) for s in pts]
                self.comm.setdefault(shape, {})[op] = fit_linear(sizes, [float(pts[k]) for k in pts])
        self.compute: Dict[str, dict] = doc.get("compute", {})

    # -- communication -------------------------------------------------------------------------
    def scale(self, quota: float) -> float:
        """Factor for CPU-bound times at `quota` cores per rank (1 when either is unknown)."""
        return self.quota / quota if self.quota > 0 and quota > 0 else 1.0

    def comm_time(self, op: str, nbytes: float, shape: str, quota: float = 0.0,
                  concurrent: int = 0) -> Optional[float]:
        """alpha + beta * n for the shape, or None when it was not calibrated. Keys are
        '<shape>x<k>' (k groups of that shape measured at once: they share links and the
        hosts' quotas) or a bare '<shape>'; the key with the k nearest to `concurrent` wins
        (ties: the larger k, the more conservative)."""
        best = None
        for key, ops in self.comm.items():
            base, _, k = key.partition("x")
            if base != shape or op not in ops:
                continue
            dist = abs(int(k) - concurrent) if (k and concurrent) else 0
            rank = (dist, -(int(k) if k else 0))
            if best is None or rank < best[0]:
                best = (rank, ops[op])
        if best is None:
            return None
        f = best[1]
        return (f[0] + f[1] * nbytes) * self.scale(quota)

    # -- compute -------------------------------------------------------------------------------
    def timings(self, kind: str) -> Optional[dict]:
        return self.compute.get(kind)

    def to_json(self) -> str:
        return json.dumps(self.doc, indent=1, sort_keys=True)

    @staticmethod
    def load(path: str) -> "Calibration":
        with open(path) as f:
            return Calibration(json.load(f))

    def save(self, path: str) -> str:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            f.write(self.to_json())
        return path


def block_time(timings: dict, what: str, tp: int, micro_batch: int) -> Optional[float]:
    """timings[what]['t,b'] (seconds), or None when that shape was not measured."""
    return (timings.get(what) or {}).get(f"{tp},{micro_batch}")


def calibrated_comm(base, cal: Calibration, placement: Sequence[str], cluster_of_host: Dict[str, str],
                    quota_of_rank: Optional[Sequence[float]] = None):
    """A planner Comm pricing every operation as max(link cost from `base`, the calibrated
    CPU-bound cost of its group shape); shapes not calibrated fall back to `base` alone.
    quota_of_rank: the cores of each rank (the slowest member's quota scales the group)."""
    from .estimate import Comm

    def quota(ranks):
        return min(quota_of_rank[r] for r in ranks) if quota_of_rank else 0.0

    world = len(placement)

    def coll(c, n, ranks):
        # a TP/DP group is one of world / size groups that run the same operation at once;
        # '<op>_async' (a batch of async operations): as measured so, else as '<op>'
        plain = c[:-len("_async")] if c.endswith("_async") else c
        link = base.coll(plain, n, ranks)
        shape, k = group_shape(placement, cluster_of_host, ranks), max(1, world // len(ranks))
        cpu = cal.comm_time(c, n, shape, quota(ranks), concurrent=k)
        if cpu is None and plain != c:
            cpu = cal.comm_time(plain, n, shape, quota(ranks), concurrent=k)
        return link if cpu is None else max(link, cpu)

    def p2p(s, d, n, concurrent=1):
        # a pipeline's messages as measured between units of compute where the calibration has them
        link, shape = base.p2p(s, d, n), group_shape(placement, cluster_of_host, (s, d))
        cpu = cal.comm_time("p2p_in_place", n, shape, quota((s, d)), concurrent=concurrent)
        if cpu is None:
            cpu = cal.comm_time("p2p", n, shape, quota((s, d)), concurrent=concurrent)
        return link if cpu is None else max(link, cpu)

    return Comm(coll, p2p, base.where, base.algorithm, p2p_concurrent=True, knows_async=True)


def spec_partitions(world: int, tps: Sequence[int], pps: Sequence[int], layouts: Sequence[str],
                    placement: Sequence[str], cluster_of_host: Dict[str, str]) -> List[dict]:
    """The group partitions a calibration must measure so that every group of every candidate
    layout has a calibrated key: the groups that run an operation at the same time, measured
    together (they share links and the hosts' quotas): a layout's TP groups, its DP groups, the
    world; for p2p, the t * d pairs of one pipeline boundary. Key '<shape>x<k>' with k the
    number of groups running at once (the estimate asks for world / size, or t * d)."""
    from ..parallel.layout import Layout
    out, seen = [], set()

    def add(kind, groups, k):
        shape = group_shape(placement, cluster_of_host, groups[0])
        groups = [g for g in groups if group_shape(placement, cluster_of_host, g) == shape]
        key = f"{shape}x{k}"
        if len(groups[0]) < 2 or (kind, key) in seen:
            return
        seen.add((kind, key))
        out.append({"kind": kind, "shape": key, "groups": groups})

    add("coll", [list(range(world))], 1)
    for t in tps:
        for p in pps:
            if world % (t * p):
                continue
            for layout in layouts:
                lay = Layout(world, t, p, layout=layout)
                for groups in (lay.tp_groups(), lay.dp_groups()):
                    by_shape = {}
                    for g in groups:
                        by_shape.setdefault(group_shape(placement, cluster_of_host, g), []).append(g)
                    for gs in by_shape.values():
                        add("coll", gs, len(groups))
                pp = lay.pp_groups()
                for s in range(p - 1):  # boundary s -> s + 1 (every order's neighbours: any pair of positions)
                    for s2 in range(s + 1, p):
                        pairs = [[g[s], g[s2]] for g in pp]
                        by_shape = {}
                        for pr in pairs:
                            by_shape.setdefault(group_shape(placement, cluster_of_host, pr), []).append(pr)
                        for gs in by_shape.values():
                            add("p2p", gs, len(pairs))
    return out


def cache_key(doc: dict) -> str:
    """A short stable name for what a calibration was measured for (its cache file name)."""
    import hashlib
    return hashlib.sha1(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def sizes_for(nbytes_max: float, n_sizes: int = 3, lo: int = 256) -> List[int]:
    """Geometric message sizes from lo to nbytes_max (multiples of 256 bytes)."""
    hi = max(lo, int(nbytes_max))
    if n_sizes < 2 or hi == lo:
        return [lo]
    r = (hi / lo) ** (1.0 / (n_sizes - 1))
    return sorted({int(math.ceil(lo * r ** i / 256.0)) * 256 for i in range(n_sizes)})


def cluster_of_host(topo_dict: dict) -> Dict[str, str]:
    """Host name -> cluster name, from a UCCL_TOPO_FILE document."""
    out = {}
    for c in topo_dict.get("clusters", []):
        for h in c.get("hosts", []):
            out[h if isinstance(h, str) else h["name"]] = c["name"]
    return out


def apply(cal: Calibration, cluster, base):
    """Gives the cluster's device kinds the calibration's measured timings (kinds it measured)
    and returns the Comm to plan with: max(link cost, calibrated CPU-bound cost). A calibration
    with measured link rates ('links') replaces the cluster's declared ones first (the link
    cost is then uccl's cost model on the measured rates, not `base`)."""
    if cal.doc.get("links"):
        from .estimate import Comm
        cluster.topo_dict = with_measured_links(cluster.topo_dict, cal.doc["links"])
        base = Comm.from_uccl(cluster.topology())
    for k in {id(k): k for k in cluster.device_of_rank}.values():
        t = cal.timings(k.name) or (cal.timings("default") if len(cal.compute) == 1 else None)
        if t:
            k.timings = t
    quotas = [k.cpu_quota for k in cluster.device_of_rank]
    return calibrated_comm(base, cal, cluster.placement, cluster_of_host(cluster.topo_dict),
                           quotas if all(q > 0 for q in quotas) else None)


def link_items(placement: Sequence[str], cluster_of: Dict[str, str]) -> List[dict]:
    """The pairs whose links calibrate.py measures, one per level a topology file declares a
    rate for: 'host' (two ranks of one host: host_gbps), 'nic:<cluster>' (first ranks of two
    hosts of the cluster: its nic_gbps), 'uplink:<a>,<b>' (first ranks of a host in each of two
    clusters: their uplink_gbps). Ranks are the first that qualify, in rank order."""
    first: Dict[str, int] = {}
    items: List[dict] = []
    for r, h in enumerate(placement):
        if h in first:
            if not any(it["level"] == "host" for it in items):
                items.append({"level": "host", "pair": [first[h], r]})
        else:
            first[h] = r
    hosts_of: Dict[str, List[str]] = {}
    for h in first:  # hosts in rank order
        hosts_of.setdefault(cluster_of.get(h, ""), []).append(h)
    for c, hs in hosts_of.items():
        if len(hs) > 1:
            items.append({"level": f"nic:{c}", "pair": [first[hs[0]], first[hs[1]]]})
    names = list(hosts_of)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            items.append({"level": f"uplink:{a},{b}", "pair": [first[hosts_of[a][0]], first[hosts_of[b][0]]]})
    return items


def with_measured_links(topo_dict: dict, links: Dict[str, float]) -> dict:
    """A copy of a UCCL_TOPO_FILE document whose declared rates are replaced by measured ones
    (Gbit/s per level, from a calibration's 'links'): 'host' -> host_gbps (top level and every
    cluster), 'nic:<c>' -> cluster c's nic_gbps and its hosts' NIC gbps, 'uplink:<a>,<b>' ->
    the uplink_gbps of a and b (a cluster in several pairs keeps the fastest: each pair measures
    the slower of its two uplinks; inter_cluster_gbps, where declared, becomes the fastest
    measured uplink). Levels the document does not have are ignored."""
    import copy
    doc = copy.deepcopy(topo_dict)
    clusters = {c.get("name"): c for c in doc.get("clusters", [])}
    uplink: Dict[str, float] = {}
    for level, gbit in links.items():
        if not gbit or gbit <= 0:
            continue
        kind, _, name = level.partition(":")
        if kind == "host":
            doc["host_gbps"] = gbit
            for c in clusters.values():
                if "host_gbps" in c:
                    c["host_gbps"] = gbit
        elif kind == "nic" and name in clusters:
            c = clusters[name]
            c["nic_gbps"] = gbit
            for h in c.get("hosts", []):
                for nic in (h.get("nics", []) if isinstance(h, dict) else []):
                    if "gbps" in nic:
                        nic["gbps"] = gbit
        elif kind == "uplink":
            for cn in name.split(","):
                if cn in clusters:
                    uplink[cn] = max(uplink.get(cn, 0.0), gbit)
    for cn, gbit in uplink.items():
        clusters[cn]["uplink_gbps"] = gbit
    if uplink and "inter_cluster_gbps" in doc:
        doc["inter_cluster_gbps"] = max(uplink.values())
    return doc


def tp_inside_hosts(placement: Sequence[str], t: int) -> bool:
    """Whether every TP group of size t (t consecutive ranks: tp varies fastest) is on one host."""
    return len(placement) % t == 0 and all(len(set(placement[i:i + t])) == 1 for i in range(0, len(placement), t))


def tp_in_place(timings: Optional[dict], tp: int, micro_batch: int) -> Optional[float]:
    """Seconds TP adds to one block's forward + backward as a stage runs it (block_tp - block,
    both measured by the calibration, every TP group at once), or None when not measured."""
    with_tp = block_time(timings or {}, "block_tp", tp, micro_batch)
    alone = block_time(timings or {}, "block", tp, micro_batch)
    return None if with_tp is None or alone is None else max(0.0, with_tp - alone)


def make_spec(cluster, model, max_micro_batch: int, reps: int = 3, min_s: float = 1.0,
              layouts: Sequence[str] = ("holmes", "naive")) -> dict:
    """The calibration run's input (calibrate.py's SPEC) for a planner cluster and model: every
    TP size the search may use, micro-batches up to max_micro_batch, every group of every
    layout with p <= layers, messages of 256 B to 1 MiB."""
    def divisors(n):
        return [k for k in range(1, n + 1) if n % k == 0]
    per_host = min(cluster.devices_per_host.values())
    bs = [b for b in divisors(model.global_batch) if b <= max_micro_batch]
    tps = [t for t in divisors(per_host) if model.heads % t == 0 and model.seq % t == 0]
    return {"model": dict(hidden=model.hidden, heads=model.heads, seq=model.seq, vocab=model.vocab),
            "tps": tps, "micro_batches": bs, "sizes": sizes_for(1 << 20, 4), "reps": reps,
            "min_s": min_s, "kind_of_rank": [d.name for d in cluster.device_of_rank],
            "links": link_items(cluster.placement, cluster_of_host(cluster.topo_dict)), "link_bytes": 4 << 20,
            "tp_in_place": [t for t in tps if t > 1 and tp_inside_hosts(cluster.placement, t)], "p2p_in_place": True,
            "partitions": spec_partitions(cluster.world, tps, [p for p in divisors(cluster.world) if p <= model.layers],
                                          layouts, cluster.placement, cluster_of_host(cluster.topo_dict))}
