"""Rank program: hierarchical vs flat ring, results and byte counters.

Run by every rank (launched by testbed.launch or tests/topo). Prints one line
``RESULT <json>`` with, per case, whether hier == ring == the numpy reference bit for bit, and
the bytes this rank sent per topology level. Data are small integers (exact in every dtype,
bf16 and fp16 included) so that a different summation order cannot change a single bit: any
difference is a real bug, not rounding.
"""
import json
import os
import sys

import numpy as np

import uccl

try:
    import ml_dtypes
    BF16 = ml_dtypes.bfloat16
except ImportError:  # pragma: no cover
    BF16 = None

DTYPES = ["int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
OPS = ["sum", "prod", "min", "max", "avg", "premul_sum"]


def np_dtype(name):
    return BF16 if name == "bfloat16" else np.dtype(name)


def data(rank, n, dtype, op):
    """Values whose reduction over <= 8 ranks is exact in every dtype."""
    rng = np.random.default_rng(1000 + rank)
    if op == "prod":
        v = rng.integers(1, 3, n)          # products of 1s and 2s: <= 2^8
    elif dtype in ("uint8",):
        v = rng.integers(0, 4, n)
    else:
        v = rng.integers(-3, 4, n)
    return v.astype(np_dtype(dtype))


def reference(all_inputs, op, size):
    x = np.stack([a.astype(np.float64) for a in all_inputs])
    if op in ("sum", "premul_sum"):
        r = x.sum(0) * (2.0 if op == "premul_sum" else 1.0)
    elif op == "prod":
        r = x.prod(0)
    elif op == "min":
        r = x.min(0)
    elif op == "max":
        r = x.max(0)
    else:
        r = x.sum(0) / size
    return r


def run_case(comms, coll, dtype, op, count, rank, size):
    """Returns (ok, why, {algo: stats}) for one collective on every comm in `comms`."""
    outs, stats = {}, {}
    scalar = 2.0 if op == "premul_sum" else None
    for name, c in comms.items():
        if coll == "all_reduce":
            x = data(rank, count, dtype, op)
            w = c.all_reduce(x, op=op, scalar=scalar, async_op=True)
        elif coll == "all_gather":
            x = data(rank, count, dtype, "sum")
            w = c.all_gather(x, async_op=True)
        else:
            x = data(rank, count * size, dtype, op)
            w = c.reduce_scatter(x, op=op, scalar=scalar, async_op=True)
        out = w.wait()
        outs[name] = np.asarray(out if out is not None else x).view(np.uint8).tobytes()
        stats[name] = w.stats()
    # numpy reference (integer types and avg: compare only where the result is exact)
    if coll == "all_gather":
        ref = np.concatenate([data(r, count, dtype, "sum") for r in range(size)])
    else:
        n = count if coll == "all_reduce" else count * size
        ref = reference([data(r, n, dtype, op) for r in range(size)], op, size)
        if coll == "reduce_scatter":
            ref = ref[rank * count:(rank + 1) * count]
    ok, why = True, ""
    vals = list(outs.values())
    if any(v != vals[0] for v in vals[1:]):
        ok, why = False, "algorithms differ"
    elif op != "avg":  # avg rounds differently from numpy's float64 mean: algorithms only
        got = np.frombuffer(vals[0], dtype=np_dtype(dtype)).astype(np.float64)
        exp = ref.astype(np_dtype(dtype)).astype(np.float64)
        if not np.array_equal(got, exp):
            ok, why = False, f"differs from numpy reference: {got[:6]} vs {exp[:6]}"
    return ok, why, stats


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "full"
    comm = uccl.init()
    rank, size = comm.rank, comm.size
    comms = {"ring": comm.split(0, algorithm="ring", name="ring"),
             "hier": comm.split(0, algorithm="hier", name="hier")}
    cases = []
    counts = [0, 1, 7, 1000] if mode == "full" else [1000]
    dtypes = DTYPES if mode == "full" else ["float32", "int32"]
    for coll in ("all_reduce", "all_gather", "reduce_scatter"):
        for dtype in dtypes:
            ops = ["sum"] if coll == "all_gather" else (OPS if mode == "full" else ["sum", "max"])
            for op in ops:
                for count in counts:
                    ok, why, st = run_case(comms, coll, dtype, op, count, rank, size)
                    cases.append({"coll": coll, "dtype": dtype, "op": op, "count": count, "ok": ok, "why": why,
                                  "algos": {k: v["algorithm"] for k, v in st.items()},
                                  "level_bytes": {k: dict(v["bytes_sent_by_level"]) for k, v in st.items()}})
    out = {"rank": rank, "size": size, "cases": cases,
           "describe": comms["hier"].describe() if rank == 0 else ""}
    print("RESULT " + json.dumps(out), flush=True)
    comm.barrier()


if __name__ == "__main__":
    main()
