"""The collectives of uccl-perf: buffer sizes, in-place layouts, bandwidth factors, checks.

One Coll per nccl-tests binary (all_reduce_perf, ...), with nccl-tests' conventions:
  * `count` given a size: the per-rank element count passed to the collective ("count" column);
    the "size" column is max(send bytes, receive bytes).
  * algbw = base bytes / time, busbw = algbw * factor (the bandwidth of the busiest link in an
    optimal algorithm, comparable to the hardware's rate whatever the rank count):
        all_reduce      base count        factor 2(n-1)/n
        all_gather      base count*n      factor (n-1)/n
        reduce_scatter  base count*n      factor (n-1)/n
        alltoall        base count*n      factor (n-1)/n
        gather, scatter base count*n      factor (n-1)/n
        broadcast, reduce, sendrecv  base count  factor 1
  * in place: the send buffer lies inside the receive buffer where the collective allows it
    (all_gather/gather: send = recv + rank*count; reduce_scatter/scatter: recv = send + rank*count;
    the others: send == recv). In-place sendrecv sends a buffer to the next rank while receiving
    into it from the previous (MPI_Sendrecv_replace): uccl sends from a copy taken first.
"""
from . import data


class Coll:
    def __init__(self, name, reduces, rooted, send_mult, recv_mult, base_mult, factor, send_inplace, recv_inplace):
        self.name = name
        self.reduces = reduces    # has a reduction op
        self.rooted = rooted      # has a root
        self.send_mult = send_mult  # send elements = count * (n if send_mult else 1)
        self.recv_mult = recv_mult
        self.base_mult = base_mult  # algbw bytes = count * size * (n if base_mult else 1)
        self.factor = factor        # busbw factor as a function of n
        self.send_inplace = send_inplace  # in place: send = buf + rank*count*send_inplace
        self.recv_inplace = recv_inplace

    def predicted_s(self, comm, count, esize):
        """uccl's prediction for one operation (comm.estimate on the cost model's D: the
        algbw base bytes; sendrecv: this rank's send to the next rank and receive from the last)."""
        n, nbytes = comm.size, count * esize * (comm.size if self.base_mult else 1)
        if self.name == "sendrecv":
            return comm.estimate_p2p(sends=[((comm.rank + 1) % n, nbytes)], recvs=[((comm.rank - 1) % n, nbytes)])
        return comm.estimate({"alltoall": "all_to_all"}.get(self.name, self.name), nbytes)

    def count(self, nbytes, esize, n):
        c = nbytes // esize
        return c // n if (self.send_mult or self.recv_mult) else c

    def send_count(self, count, n):
        return count * (n if self.send_mult else 1)

    def recv_count(self, count, n):
        return count * (n if self.recv_mult else 1)

    def bandwidth(self, count, esize, n, sec):
        """(algbw, busbw) in GB/s (1e9), as nccl-tests computes them."""
        if sec <= 0:
            return 0.0, 0.0
        alg = count * esize * (n if self.base_mult else 1) / 1e9 / sec
        return alg, alg * self.factor(n)

    # -- expected data ---------------------------------------------------------------------
    def send_tiles(self, t, op, n, rank, count):
        """[(element offset in the send buffer, tile)] of this rank's input blocks."""
        if self.send_mult:
            return [(j * count, data.values(t, op, n, rank, j * count)) for j in range(n)]
        return [(0, data.values(t, op, n, rank, 0))]

    def expected(self, t, op, n, rank, count, root):
        """[(element offset in the receive buffer, tile)] this rank must hold afterwards, or []
        where the collective writes nothing here (non-roots of reduce and gather)."""
        v = lambda q, start: data.values(t, op, n, q, start)
        k = self.name
        if k == "all_reduce":
            return [(0, data.reduce_tiles(t, op, [v(q, 0) for q in range(n)]))]
        if k == "reduce":
            return [(0, data.reduce_tiles(t, op, [v(q, 0) for q in range(n)]))] if rank == root else []
        if k == "broadcast":
            return [(0, v(root, 0))]
        if k == "all_gather":
            return [(j * count, v(j, 0)) for j in range(n)]
        if k == "gather":
            return [(j * count, v(j, 0)) for j in range(n)] if rank == root else []
        if k == "reduce_scatter":
            return [(0, data.reduce_tiles(t, op, [v(q, rank * count) for q in range(n)]))]
        if k == "alltoall":
            return [(j * count, v(j, rank * count)) for j in range(n)]
        if k == "scatter":
            return [(0, v(root, rank * count))]
        if k == "sendrecv":
            return [(0, v((rank - 1) % n, 0))]
        raise ValueError(k)

    def reads_send(self, rank, root):
        return not (self.name == "scatter" and rank != root)


_ALL = lambda n: 2.0 * (n - 1) / n
_RS = lambda n: (n - 1) / n
_ONE = lambda n: 1.0

COLLS = {c.name: c for c in [
    #    name             reduces rooted send_mult recv_mult base_mult factor send_in recv_in
    Coll("all_reduce", True, False, False, False, False, _ALL, 0, 0),
    Coll("all_gather", False, False, False, True, True, _RS, 1, 0),
    Coll("reduce_scatter", True, False, True, False, True, _RS, 0, 1),
    Coll("broadcast", False, True, False, False, False, _ONE, 0, 0),
    Coll("reduce", True, True, False, False, False, _ONE, 0, 0),
    Coll("alltoall", False, False, True, True, True, _RS, 0, 0),
    Coll("gather", False, True, False, True, True, _RS, 1, 0),
    Coll("scatter", False, True, True, False, True, _RS, 0, 1),
    Coll("sendrecv", False, False, False, False, False, _ONE, 0, 0),
]}
ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
           "all_to_all": "alltoall", "bcast": "broadcast", "send_recv": "sendrecv"}


def get(name):
    key = name.replace("-", "_").lower()
    key = key[:-5] if key.endswith("_perf") else key
    key = ALIASES.get(key, key)
    if key not in COLLS:
        raise ValueError(f"unknown collective {name!r}; expected one of {', '.join(COLLS)}")
    return COLLS[key]
