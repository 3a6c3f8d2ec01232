"""Planner inputs: the cluster (a UCCL_TOPO_FILE plus what runs on each host) and the model.

Cluster file (YAML or JSON):
    topology: topo.yaml            # UCCL_TOPO_FILE (path relative to this file) or the dict inline
    devices:                       # device kinds: speed and memory
      a100: {tflops: 312, efficiency: 0.45, memory_gib: 80}
      cpu-fast: {flops: 2.0e9, memory_gib: 4, cpu_quota: 0.5}  # effective FLOP/s (--profile measures
                                                                # it, under a cgroup of 0.5 cores)
    hosts:                         # per host (or per cluster name): device kind and count
      c0: {device: cpu-fast, count: 2}
      c1h0: {device: cpu-slow, count: 2}
Ranks are numbered host by host in the topology file's order (what torchrun --node-rank gives).

Model (in the same file under `model:` or a separate file):
    {layers, hidden, heads, seq, vocab, global_batch, bytes_per_param: 4, act_bytes: 4}
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Optional


class PlanInputError(ValueError):
    pass


@dataclasses.dataclass
class ModelSpec:
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    global_batch: int
    bytes_per_param: int = 4   # weights and gradients (the trainer here: fp32)
    act_bytes: int = 4         # activations on the wire and in memory
    optimizer_bytes: int = 12  # Adam master + m + v per parameter (ZeRO-1: divided by d)
    recompute: str = "none"    # "selective": attention scores recomputed (Korthikanti): 34 sbh/t
    bucket_bytes: int = 0      # DP gradient buckets (uccl.parallel's ZeRO: 1 MiB); 0: one op per stage

    def layer_params(self) -> int:
        h = self.hidden
        return 12 * h * h + 13 * h

    def embed_params(self) -> int:
        return (self.vocab + self.seq) * self.hidden

    def head_params(self) -> int:
        return self.vocab * self.hidden + 2 * self.hidden

    def layer_flops(self, micro_batch: int) -> float:
        """Forward + backward FLOPs of one transformer layer for one micro-batch (3x forward)."""
        b, s, h = micro_batch, self.seq, self.hidden
        return 3.0 * (24.0 * b * s * h * h + 4.0 * b * s * s * h)

    def head_flops(self, micro_batch: int) -> float:
        return 3.0 * 2.0 * micro_batch * self.seq * self.hidden * self.vocab

    def act_bytes_per_layer(self, micro_batch: int, tp: int) -> float:
        """Stored activations of one layer and micro-batch (Korthikanti et al., with sequence
        parallelism: everything divided by t)."""
        b, s, h, a = micro_batch, self.seq, self.hidden, self.heads
        per = 34 + (0 if self.recompute == "selective" else 5 * a * s / h)
        return s * b * h * per / tp * (self.act_bytes / 2)


@dataclasses.dataclass
class DeviceKind:
    name: str
    flops: float        # effective FLOP/s of training math on this device
    memory: float       # bytes
    cpu_quota: float = 0.0  # testbed: cores this kind's processes get (cgroup), used by --profile
    # measured seconds (calibration.py): {"block": {"t,b": s}, "head": {..}, "adam_per_param": s};
    # when a (t, b) is there, the stage's compute is priced from it instead of flops
    timings: Optional[dict] = None

    @staticmethod
    def parse(name: str, d: dict) -> "DeviceKind":
        if "flops" in d:
            flops = float(d["flops"])
        elif "tflops" in d:
            flops = float(d["tflops"]) * 1e12 * float(d.get("efficiency", 0.5))
        else:
            raise PlanInputError(f"device kind {name!r}: give 'flops' (effective FLOP/s) or 'tflops' (+ 'efficiency')")
        if flops <= 0:
            raise PlanInputError(f"device kind {name!r}: speed must be positive, got {flops}")
        mem = float(d.get("memory_gib", 80)) * (1 << 30)
        return DeviceKind(name, flops, mem, float(d.get("cpu_quota", 0.0)))


@dataclasses.dataclass
class Cluster:
    topo_dict: dict
    placement: List[str]          # host name per rank
    device_of_rank: List[DeviceKind]
    devices_per_host: Dict[str, int]

    @property
    def world(self) -> int:
        return len(self.placement)

    def topology(self):
        try:
            from uccl import cost  # the C++ cost model (uccl.cost)
        except ImportError as e:
            raise PlanInputError(f"uccl.cost (uccl's cost model from Python) is not available: {e}") from e
        return cost.Topology.from_dict(self.topo_dict, self.placement)


def _load(path: str) -> dict:
    with open(path) as f:
        text = f.read()
    if path.endswith(".json"):
        return json.loads(text)
    import yaml
    return yaml.safe_load(text)


def cluster_from_dict(doc: dict, base_dir: str = ".") -> Cluster:
    topo = doc.get("topology")
    if isinstance(topo, str):
        topo = _load(os.path.join(base_dir, topo))
    if not isinstance(topo, dict) or "clusters" not in topo:
        raise PlanInputError("cluster file: 'topology' must be a UCCL_TOPO_FILE (path or dict) with 'clusters'")
    kinds = {n: DeviceKind.parse(n, d) for n, d in (doc.get("devices") or {}).items()}
    if not kinds:
        raise PlanInputError("cluster file: no 'devices' (device kinds with speed and memory)")
    per = doc.get("hosts") or {}
    placement, dev, counts = [], [], {}
    for c in topo["clusters"]:
        for h in c.get("hosts", []):
            hname = h if isinstance(h, str) else h["name"]
            spec = per.get(hname) or per.get(c["name"]) or per.get("default")
            if spec is None:
                raise PlanInputError(f"cluster file: no device entry for host {hname!r} (or its cluster {c['name']!r})")
            kind = kinds.get(spec["device"])
            if kind is None:
                raise PlanInputError(f"cluster file: host {hname!r} uses unknown device kind {spec['device']!r}")
            n = int(spec.get("count", 1))
            counts[hname] = n
            placement += [hname] * n
            dev += [kind] * n
    return Cluster(topo, placement, dev, counts)


def model_from_dict(d: dict) -> ModelSpec:
    try:
        m = ModelSpec(**{k: (v if k == "recompute" else int(v)) for k, v in d.items() if k != "name"})
        if m.bucket_bytes < 0:
            raise PlanInputError(f"model: bucket_bytes must be >= 0, got {m.bucket_bytes}")
    except TypeError as e:
        raise PlanInputError(f"model: {e}") from e
    for k in ("layers", "hidden", "heads", "seq", "vocab", "global_batch"):
        if getattr(m, k) < 1:
            raise PlanInputError(f"model: {k} must be positive, got {getattr(m, k)}")
    return m


def load(cluster_path: str, model_path: Optional[str] = None):
    doc = _load(cluster_path)
    cl = cluster_from_dict(doc, os.path.dirname(os.path.abspath(cluster_path)))
    md = _load(model_path) if model_path else doc.get("model")
    if md is None:
        raise PlanInputError("no model: give --model FILE or a 'model:' section in the cluster file")
    return cl, model_from_dict(md)
