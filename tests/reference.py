"""Deterministic inputs and numpy reference results for the collective tests.

Every rank can compute every other rank's input (a function of rank, seed, dtype, count and op),
so each rank checks its own output against the reference without talking to the parent.

Reference semantics (the contract the core promises, DESIGN.md / include/uccl/types.h):
  * integer sum / prod / premul_sum wrap around like numpy's fixed-width arithmetic;
  * integer avg is the sum divided by the number of ranks, truncated toward zero (inputs are
    kept small enough that the sum itself does not wrap);
  * premul_sum multiplies every input by the scalar before summing (0.5 for floats, 2 for ints);
  * floats are compared with a tolerance: fp16/bf16 are reduced in float and rounded to the
    storage type after every step, so the error grows with the number of ranks.
"""
import zlib

import numpy as np

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a test requirement
    BF16 = None

INT_DTYPES = ["int8", "uint8", "int32", "int64"]
FLOAT_DTYPES = ["float16", "bfloat16", "float32", "float64"]
DTYPES = INT_DTYPES + FLOAT_DTYPES
OPS = ["sum", "prod", "min", "max", "avg", "premul_sum"]
COUNTS = [0, 1, 7, 1023]
BIG = (1 << 20) + 3

# Unit roundoff of each float type (half an ulp at 1.0).
_EPS = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24, "float64": 2.0 ** -53}


def np_dtype(name):
    return BF16 if name == "bfloat16" else np.dtype(name)


def is_int(name):
    return name in INT_DTYPES


def scalar_for(dtype):
    """The premul_sum factor used by the tests."""
    return 2 if is_int(dtype) else 0.5


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


_BLOCK = 4099


def make_input(rank, dtype, count, op="sum", seed=0):
    """Rank `rank`'s input for one op; integer inputs span the full range unless op == avg.

    Large inputs repeat a random block of a prime length (generating millions of random numbers
    per rank and per peer would dominate the suite's run time on a small machine).
    """
    if count > _BLOCK:
        block = make_input(rank, dtype, _BLOCK, op, seed)
        return np.resize(block, count)
    rng = _rng(rank, dtype, count, op, seed)
    dt = np_dtype(dtype)
    if is_int(dtype):
        info = np.iinfo(dt)
        lo, hi = (int(info.min), int(info.max))
        if op == "avg":  # keep the sum inside the range: avg's sum must not wrap
            lo, hi = max(lo // 8, -1000), min(hi // 8, 1000)  # up to 8 ranks
        if op == "prod":  # products that wrap but are rarely 0 modulo 2^bits
            lo, hi = {"int8": (-7, 7), "uint8": (0, 9), "int32": (-40, 40), "int64": (-2 ** 20, 2 ** 20)}[dtype]
        return rng.integers(lo, hi, size=count, endpoint=True, dtype=np.int64).astype(dt)
    if op == "prod":
        v = rng.uniform(0.7, 1.4, size=count) * rng.choice([-1.0, 1.0], size=count)
    elif op in ("min", "max"):
        v = rng.uniform(-100, 100, size=count)
    else:
        v = rng.uniform(-1, 1, size=count)
    return v.astype(dt)


def reduce_ref(inputs, dtype, op, scalar=None):
    """The exact (integers) or float64-then-rounded (floats) reduction of the inputs."""
    dt = np_dtype(dtype)
    n = len(inputs)
    if scalar is None:
        scalar = scalar_for(dtype)
    if is_int(dtype):
        stack = np.stack(inputs).astype(dt)
        with np.errstate(over="ignore"):
            if op == "sum":
                return np.add.reduce(stack, axis=0, dtype=dt)
            if op == "prod":
                return np.multiply.reduce(stack, axis=0, dtype=dt)
            if op == "min":
                return stack.min(axis=0)
            if op == "max":
                return stack.max(axis=0)
            if op == "premul_sum":
                return np.add.reduce(stack * dt.type(scalar), axis=0, dtype=dt)
            if op == "avg":
                s = stack.astype(np.int64).sum(axis=0)
                q = np.abs(s) // n * np.sign(s)  # truncation toward zero
                return q.astype(dt)
        raise ValueError(op)
    stack = np.stack([np.asarray(x).astype(np.float64) for x in inputs])
    if op == "sum":
        r = stack.sum(axis=0)
    elif op == "prod":
        r = stack.prod(axis=0)
    elif op == "min":
        r = stack.min(axis=0)
    elif op == "max":
        r = stack.max(axis=0)
    elif op == "avg":
        r = stack.sum(axis=0) / n
    elif op == "premul_sum":
        r = (stack * scalar).sum(axis=0)
    else:
        raise ValueError(op)
    return r.astype(dt)


def tolerance(dtype, op, world):
    """(rtol, atol) for a float reduction over `world` ranks; (0, 0) means exact."""
    if is_int(dtype) or op in ("min", "max"):
        return 0.0, 0.0
    eps = _EPS[dtype]
    # Each of the world-1 combining steps rounds once (fp16/bf16: to storage), the reference
    # rounds once more, and avg/premul_sum scale once: a few ulps per step of the partial sums,
    # whose magnitude is at most `world` for the inputs above.
    steps = world + 2
    if op == "prod":
        return 4 * eps * steps, 4 * eps * steps
    return 4 * eps * steps, 4 * eps * steps * max(1, world / 2)


def expected(world, dtype, op, count, seed=0, scalar=None):
    """reduce_ref over every rank's make_input(); large counts reduce one block and repeat it."""
    n = min(count, _BLOCK)
    block = reduce_ref([make_input(p, dtype, count if count <= _BLOCK else _BLOCK, op, seed) for p in range(world)],
                       dtype, op, scalar)
    return block if n == count else np.resize(block, count)


def check_reduction(check, got, want, dtype, op, world, what):
    """Compares got with the reference `want` exactly or within tolerance()."""
    rtol, atol = tolerance(dtype, op, world)
    if rtol == 0 and atol == 0:
        return check.equal(got, want, what)
    return check.close(got, want, what, rtol, atol)
