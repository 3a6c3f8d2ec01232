"""Data types, input patterns and exact result checking for uccl-perf.

Why the inputs look like this: every rank's input is a small integer pattern, so sums,
products, minima and maxima are exact in every dtype (no rounding, whatever order the
algorithm reduces in) and a result can be compared bit for bit, like nccl-tests does. Only
`avg` on floating types divides (x * (1/n) inside uccl) and is allowed 2 ULP.

The pattern of rank r at element index i depends on i only through i mod PERIOD, so the
expected result of any collective is periodic too: it is computed for one period and compared
against the received array reshaped to rows of PERIOD elements, without building full-size
expected arrays (256 MiB sweeps stay cheap on a small machine).
"""
import numpy as np

from .._core import DTYPES, RED_OPS  # uccl::DataType / RedOp values, from C++

PERIOD = 11  # prime: a block or chunk shifted by a power of two never lines up with itself

# nccl-tests' names first; uccl's (numpy) names and short forms are accepted too.
# name -> (uccl dtype code, numpy storage dtype, exact-integer limit of the type or None)
TYPES = {
    "int8": (DTYPES["int8"], np.int8, None),
    "uint8": (DTYPES["uint8"], np.uint8, None),
    "int32": (DTYPES["int32"], np.int32, None),
    "int64": (DTYPES["int64"], np.int64, None),
    "half": (DTYPES["float16"], np.float16, 2048),
    "bfloat16": (DTYPES["bfloat16"], np.uint16, 256),  # stored as raw bits: numpy has no bfloat16
    "float": (DTYPES["float32"], np.float32, 1 << 24),
    "double": (DTYPES["float64"], np.float64, 1 << 53),
}
TYPE_ALIASES = {"float16": "half", "fp16": "half", "bf16": "bfloat16", "float32": "float", "fp32": "float",
                "float64": "double", "fp64": "double", "char": "int8", "int": "int32"}
# nccl-tests' op names; "mulsum" is NCCL's premul_sum.
OPS = {n: RED_OPS["premul_sum" if n == "mulsum" else n] for n in ("sum", "prod", "max", "min", "avg", "mulsum")}
OP_ALIASES = {"premul_sum": "mulsum"}
MULSUM_SCALAR = 2.0  # exact in every dtype


def type_name(name):
    n = TYPE_ALIASES.get(name, name)
    if n not in TYPES:
        raise ValueError(f"unknown datatype {name!r}; expected one of {', '.join(TYPES)} or all")
    return n


def op_name(name):
    n = OP_ALIASES.get(name, name)
    if n not in OPS:
        raise ValueError(f"unknown op {name!r}; expected one of {', '.join(OPS)} or all")
    return n


def code(tname):
    return TYPES[tname][0]


def storage(tname):
    return np.dtype(TYPES[tname][1])


def is_float(tname):
    return TYPES[tname][2] is not None


# ---- values: math is done in float64 / int64 on one period, then stored ----------------------

def _modulus(tname, op, nranks):
    """Largest pattern range (<= PERIOD) whose reductions stay exact in this dtype."""
    limit = TYPES[tname][2]
    if limit is None or op in ("min", "max", "prod", None):
        return PERIOD
    scale = MULSUM_SCALAR if op == "mulsum" else 1.0
    return int(max(1, min(PERIOD, limit // (nranks * scale) + 1)))


def values(tname, op, nranks, rank, start):
    """One period of rank `rank`'s input starting at element `start` (float64 or int64)."""
    i = np.arange(start, start + PERIOD, dtype=np.int64)
    raw = (rank * 7 + i * 13) % PERIOD
    if op == "prod":
        raw = 1 + (raw & 1)  # products of 1s and 2s: exact powers of two
    else:
        raw = raw % _modulus(tname, op, nranks)
    return raw.astype(np.float64 if is_float(tname) else np.int64)


def to_storage(tname, v):
    """float64/int64 values -> the dtype's storage (bfloat16: round to nearest even bits)."""
    st = storage(tname)
    if tname == "bfloat16":
        bits = np.asarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return bits.astype(np.uint16)
    if not is_float(tname):
        return np.asarray(v).astype(np.int64).astype(st)  # wraps like uccl's integer math
    return np.asarray(v, dtype=np.float64).astype(st)


def from_storage(tname, s):
    if tname == "bfloat16":
        return (np.asarray(s, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return np.asarray(s).astype(np.float64 if is_float(tname) else np.int64)


def reduce_tiles(tname, op, tiles):
    """The reduction of the ranks' tiles in the dtype's own arithmetic (ints wrap, like uccl)."""
    n = len(tiles)
    if op == "mulsum":
        tiles = [t * MULSUM_SCALAR for t in tiles]
    if not is_float(tname):
        st = storage(tname)
        with np.errstate(over="ignore"):
            acc = tiles[0].astype(st)
            for t in tiles[1:]:
                t = t.astype(st)
                acc = {"prod": acc * t, "min": np.minimum(acc, t), "max": np.maximum(acc, t)}.get(op, acc + t)
        if op == "avg":
            s = acc.astype(np.int64)
            acc = (np.sign(s) * (np.abs(s) // n)).astype(st)  # C++ integer division truncates
        return acc.astype(np.int64)
    acc = tiles[0]
    for t in tiles[1:]:
        acc = {"prod": acc * t, "min": np.minimum(acc, t), "max": np.maximum(acc, t)}.get(op, acc + t)
    return acc / n if op == "avg" else acc


# ---- filling and checking buffers ------------------------------------------------------------

def fill(buf, tname, tile):
    """buf (a storage-typed view) = tile repeated."""
    tile = to_storage(tname, tile)
    k = len(buf) // PERIOD
    if k:
        buf[:k * PERIOD].reshape(k, PERIOD)[:] = tile
    rest = len(buf) - k * PERIOD
    if rest:
        buf[k * PERIOD:] = tile[:rest]


def count_wrong(buf, tname, tile, ulps=0):
    """Elements of buf that differ from tile repeated (bitwise, or within `ulps` ULP)."""
    exp = to_storage(tname, tile)
    k = len(buf) // PERIOD
    rows = [buf[:k * PERIOD].reshape(k, PERIOD)] if k else []
    rest = len(buf) - k * PERIOD
    wrong = 0
    for got, want in [(r, exp) for r in rows] + ([(buf[k * PERIOD:], exp[:rest])] if rest else []):
        if ulps == 0:
            wrong += int(np.count_nonzero(got != want))  # storage compare: bitwise for floats' bits too
        else:
            g, w = from_storage(tname, got), from_storage(tname, want)
            wrong += int(np.count_nonzero(np.abs(g - w) > ulps * _ulp(tname, w)))
    return wrong


def _ulp(tname, w):
    if tname == "bfloat16":
        return np.spacing(np.abs(w).astype(np.float32)).astype(np.float64) * 65536.0
    return np.spacing(np.abs(w).astype(storage(tname))).astype(np.float64)
