"""uccl.parallel: a small 3-D parallel trainer (TP with sequence parallelism, 1F1B pipeline with
unequal stages, ZeRO-1 data parallelism) whose groups all use the "uccl" backend, so each group
rides the network uccl's topology picks for it.

Pure-Python parts (no torch): `layout` (rank generator, groups), `partition` (Holmes-style
self-adapting layer split), `report`. The torch parts (`model`, `pipeline`, `zero`, `trainer`,
`train`) import torch when imported themselves; `import uccl` never does.
"""
from .layout import LAYOUTS, Coord, Layout, check_partition  # noqa: F401
from .partition import PartitionError, self_adapting, uniform  # noqa: F401
