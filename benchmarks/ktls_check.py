"""Rank program of benchmarks/ktls_vm.sh: an exact 8 MiB all_reduce, then three timed ones; rank 0
prints the time and its connection lines (TLS mode per direction)."""
import os
import time

import numpy as np

import uccl

comm = uccl.init()
n = 8 << 20
x = np.full(n // 4, comm.rank + 1, np.float32)
comm.all_reduce(x)
assert np.all(x == sum(r + 1 for r in range(comm.size))), "wrong sum"
t0 = time.perf_counter()
for _ in range(3): comm.all_reduce(x)
dt = (time.perf_counter() - t0) / 3
lines = [l.strip() for l in comm.describe().splitlines() if "peer" in l]
if comm.rank == 0:
    print("RESULT", os.environ.get("UCCL_ENCRYPT"), f"{dt*1e3:.1f} ms per 8 MiB all_reduce", lines)
