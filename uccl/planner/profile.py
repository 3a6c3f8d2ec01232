"""--profile: measure each device kind's effective FLOP/s on a transformer layer of the model.

On the testbed a device kind is a CPU quota (cgroup): the layer is timed in a child process
inside a cgroup with the kind's `cpu_quota` cores, one process per kind, one kind at a time.
Link rates are not measured here: they come from the topology file (uccl-perf measures them).

    python -m uccl.planner.profile HIDDEN HEADS SEQ MICRO_BATCH   # prints effective FLOP/s
"""
from __future__ import annotations

import os
import subprocess
import sys
import time


def layer_flops_here(hidden: int, heads: int, seq: int, micro_batch: int = 1, min_s: float = 2.0) -> float:
    """Mean over repeated runs for at least min_s (CPU quotas throttle in 100 ms periods)."""
    import torch
    from ..parallel.model import Block, GPTConfig, TPComm, full_init
    from .spec import ModelSpec
    torch.set_num_threads(1)
    cfg = GPTConfig(vocab=8, hidden=hidden, heads=heads, layers=1, seq=seq)
    blk = Block(cfg, 0, full_init(cfg), TPComm())
    x = torch.randn(seq, micro_batch, hidden, requires_grad=True)
    blk(x).sum().backward()
    # The mean over the whole window, not a median of single timings: under a quota most
    # single runs fit in one period's budget and look unthrottled (a median gave 28 GFLOP/s
    # at 0.1 cores); the throttled waits fall on a few of them.
    n, t0 = 0, time.perf_counter()
    while n < 5 or time.perf_counter() - t0 < min_s:
        blk(x).sum().backward()
        n += 1
    flops = ModelSpec(1, hidden, heads, seq, 8, 1).layer_flops(micro_batch)
    return flops * n / (time.perf_counter() - t0)


def profile_devices(cluster, model, log=print, period_us: int = 0) -> dict:
    """period_us: the quota's CFS period (0: the kernel's default, 100 ms)."""
    from ..parallel.cpuquota import PERIOD_US, CpuQuota
    out = {}
    kinds = {d.name: d for d in cluster.device_of_rank}
    for name, kind in kinds.items():
        cmd = [sys.executable, "-m", "uccl.planner.profile", str(model.hidden), str(model.heads), str(model.seq), "1"]
        q = CpuQuota(f"trainer-profile-{os.getpid()}-{name}", kind.cpu_quota, shares=8192,
                     period_us=period_us or PERIOD_US) if kind.cpu_quota else None
        try:
            p = subprocess.run(q.wrap(cmd) if q else cmd, capture_output=True, text=True, timeout=600)
        finally:
            if q:
                q.close()
        if p.returncode:
            raise RuntimeError(f"profiling device kind {name!r} failed:\n{p.stderr[-2000:]}")
        out[name] = float(p.stdout.split()[-1])
        log(f"profile: {name} (cpu_quota {kind.cpu_quota or 'none'}): {out[name] / 1e9:.3f} GFLOP/s effective "
            f"(was declared {kind.flops / 1e9:.3f})")
    return out


if __name__ == "__main__":
    h, a, s, b = (int(v) for v in sys.argv[1:5])
    print(layer_flops_here(h, a, s, b))
