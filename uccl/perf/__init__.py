"""uccl-perf: nccl-tests style benchmarks of uccl's collectives.

    uccl-perf all_reduce -N 2 -b 8 -e 256M -f 2          # two local ranks
    torchrun --nproc-per-node 4 -m uccl.perf all_gather -b 1M -e 64M -f 2
    mpirun -np 4 uccl-perf reduce_scatter -d all

The timed loop is C++ (_core.perf_loop); this package prepares buffers, checks results and
prints nccl-tests' table. benchmarks/compare.py reuses Measure to put uccl beside Gloo and MPI.
"""
from .bench import Buffers, Measure
from .colls import COLLS, get as get_collective

__all__ = ["Buffers", "Measure", "COLLS", "get_collective", "main"]


def main(argv=None):
    from .__main__ import main as _main
    return _main(argv)
