"""Per-step measurements of the trainer: time per group's communication, compute, and a Chrome
trace (chrome://tracing / Perfetto JSON) of one step. Pure Python (no torch).

Spans nest freely: a TP all_gather inside a forward counts both as "tp" and as "forward".
Times are wall-clock seconds of the calling thread blocked in the span (for async DP ops: the
time the step waited for them, i.e. the part not hidden behind compute).
"""
from __future__ import annotations

import collections
import contextlib
import json
import os
import time
from typing import Dict, List, Optional


class StepRecorder:
    def __init__(self, rank: int = 0):
        self.rank = rank
        self.totals: Dict[str, float] = collections.defaultdict(float)
        self.counts: Dict[str, int] = collections.defaultdict(int)
        self.tracing = False
        self.events: List[dict] = []
        self._t0 = time.perf_counter()

    @contextlib.contextmanager
    def span(self, cat: str, name: str = ""):
        t = time.perf_counter()
        try:
            yield
        finally:
            dur = time.perf_counter() - t
            self.totals[cat] += dur
            self.counts[cat] += 1
            if self.tracing:
                self.events.append({"name": name or cat, "cat": cat, "ph": "X", "pid": self.rank, "tid": cat,
                                    "ts": (t - self._t0) * 1e6, "dur": dur * 1e6})

    def reset(self, trace: bool = False) -> None:
        self.totals.clear()
        self.counts.clear()
        self.tracing = trace
        if trace:
            self.events = []

    def snapshot(self) -> Dict[str, float]:
        return dict(self.totals)


def write_chrome_trace(path: str, per_rank_events: List[List[dict]], meta: Optional[dict] = None) -> str:
    """One Chrome trace with a process per rank and a row per category."""
    events = []
    for evs in per_rank_events:
        events.extend(evs)
    for r in sorted({e["pid"] for e in events}):
        events.append({"name": "process_name", "ph": "M", "pid": r, "args": {"name": f"rank {r}"}})
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"traceEvents": events, "otherData": meta or {}}, f)
    return path


def traffic_delta(before: dict, after: dict) -> dict:
    """Difference of two backend traffic() snapshots (nested dicts of counters)."""
    out = {}
    for k, v in after.items():
        if isinstance(v, dict):
            out[k] = {kk: vv - before.get(k, {}).get(kk, 0) for kk, vv in v.items() if vv - before.get(k, {}).get(kk, 0)}
        else:
            out[k] = v - before.get(k, 0)
    return out


def format_step(step: int, r: dict) -> str:
    comm = " ".join(f"{g}={r['comm_s'].get(g, 0.0) * 1e3:.1f}ms" for g in ("tp", "pp", "dp"))
    return (f"step {step}: loss {r['loss']:.4f} | {r['step_s'] * 1e3:.1f} ms | {r['tokens_per_s']:.0f} tok/s | "
            f"comm {comm} | fwd {r['comm_s'].get('forward', 0) * 1e3:.1f}ms bwd {r['comm_s'].get('backward', 0) * 1e3:.1f}ms")
