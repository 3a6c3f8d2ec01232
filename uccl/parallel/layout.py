"""Which global ranks form each tensor-, data- and pipeline-parallel group (pure Python, no torch).

Megatron's convention: ranks are numbered tp fastest, then dp, then pp, so that with ranks
placed host by host and cluster by cluster, a TP group sits on one host, a DP group inside one
cluster (its fast fabric) and the pipeline crosses clusters (the Holmes layout). The "naive"
layout numbers pp before dp: DP groups then span clusters (the comparison point).
Stages may be placed in any order (`stage_order`): stage s runs on pipeline position
stage_order[s], which lets a planner put faster clusters on the stages with more layers.
"""
from __future__ import annotations

import dataclasses
from typing import List, Sequence

LAYOUTS = ("holmes", "naive")


@dataclasses.dataclass(frozen=True)
class Coord:
    tp: int
    dp: int
    pp: int


class Layout:
    """Rank <-> (tp, dp, pp) coordinates and the groups, for t * d * p = world."""

    def __init__(self, world: int, tp: int, pp: int, dp: int = 0, layout: str = "holmes"):
        if dp == 0:
            dp = world // (tp * pp) if tp > 0 and pp > 0 else 0
        for what, v in (("tp", tp), ("pp", pp), ("dp", dp)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"uccl.parallel: {what} size must be a positive integer, got {v!r}")
        if tp * dp * pp != world:
            raise ValueError(f"uccl.parallel: tp*dp*pp = {tp}*{dp}*{pp} = {tp * dp * pp} != world size {world}")
        if layout not in LAYOUTS:
            raise ValueError(f"uccl.parallel: layout must be one of {LAYOUTS}, got {layout!r}")
        self.world, self.tp, self.dp, self.pp, self.layout = world, tp, dp, pp, layout

    def rank(self, c: Coord) -> int:
        if self.layout == "holmes":  # tp fastest, then dp, then pp
            return c.tp + self.tp * (c.dp + self.dp * c.pp)
        return c.tp + self.tp * (c.pp + self.pp * c.dp)  # naive: tp, then pp, then dp

    def coord(self, rank: int) -> Coord:
        if not 0 <= rank < self.world:
            raise ValueError(f"uccl.parallel: rank {rank} outside world of {self.world}")
        tp, rest = rank % self.tp, rank // self.tp
        if self.layout == "holmes":
            return Coord(tp, rest % self.dp, rest // self.dp)
        return Coord(tp, rest // self.pp, rest % self.pp)

    def tp_groups(self) -> List[List[int]]:
        return [[self.rank(Coord(t, d, p)) for t in range(self.tp)] for p in range(self.pp) for d in range(self.dp)]

    def dp_groups(self) -> List[List[int]]:
        return [[self.rank(Coord(t, d, p)) for d in range(self.dp)] for p in range(self.pp) for t in range(self.tp)]

    def pp_groups(self) -> List[List[int]]:
        return [[self.rank(Coord(t, d, p)) for p in range(self.pp)] for d in range(self.dp) for t in range(self.tp)]

    def groups_of(self, rank: int) -> dict:
        """The three groups (lists of global ranks) that `rank` belongs to."""
        c = self.coord(rank)
        return {"tp": [self.rank(Coord(t, c.dp, c.pp)) for t in range(self.tp)],
                "dp": [self.rank(Coord(c.tp, d, c.pp)) for d in range(self.dp)],
                "pp": [self.rank(Coord(c.tp, c.dp, p)) for p in range(self.pp)]}

    def __repr__(self) -> str:
        return f"Layout(world={self.world}, tp={self.tp}, dp={self.dp}, pp={self.pp}, layout={self.layout!r})"


def check_partition(layers_per_stage: Sequence[int], n_layers: int, pp: int) -> List[int]:
    """Validates a layer split: pp positive counts summing to n_layers."""
    parts = [int(x) for x in layers_per_stage]
    if len(parts) != pp:
        raise ValueError(f"uccl.parallel: {len(parts)} stage sizes given for {pp} pipeline stages: {parts}")
    if any(x < 1 for x in parts):
        raise ValueError(f"uccl.parallel: every stage needs at least one layer, got {parts}")
    if sum(parts) != n_layers:
        raise ValueError(f"uccl.parallel: stage sizes {parts} sum to {sum(parts)}, the model has {n_layers} layers")
    return parts
