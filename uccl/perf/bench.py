"""One measurement of uccl-perf: buffers, the C++ timed loop, the data check.

Buffers are allocated once for the largest size (like nccl-tests) and page aligned; every size
uses their beginning. Contents are always written before timing: calloc'ed pages that were
never written all map the kernel's zero page, and reading them would look impossibly fast.
"""
import numpy as np

from .. import _core
from . import data

SENTINEL = 0x5A  # receive buffers start as this byte: a collective that writes nothing shows up


def aligned(nbytes, align=4096):
    raw = np.empty(nbytes + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes]


class Buffers:
    """send/recv byte buffers big enough for `maxbytes` of any of the chosen collectives."""

    def __init__(self, maxbytes, send=None, recv=None):
        """send/recv: existing uint8 arrays to use instead (benchmarks/compare.py shares one
        pair between uccl, Gloo and MPI so that every library works on the same memory)."""
        self.nbytes = max(int(maxbytes), 64)
        self.send = aligned(self.nbytes) if send is None else send
        self.recv = aligned(self.nbytes) if recv is None else recv
        if send is None:
            self.send.fill(0x3F)  # a normal number in every float type (no denormal slow path)
        if recv is None:
            self.recv.fill(SENTINEL)

    def layout(self, coll, count, esize, rank, nranks, in_place):
        """(send address, recv address, send view base, recv view base) in bytes for one run."""
        if not in_place:
            return self.send.ctypes.data, self.recv.ctypes.data, (self.send, 0), (self.recv, 0)
        base = self.recv.ctypes.data
        so = rank * count * esize * coll.send_inplace
        ro = rank * count * esize * coll.recv_inplace
        return base + so, base + ro, (self.recv, so), (self.recv, ro)


def typed(view_base, tname, nelems):
    buf, off = view_base
    st = data.storage(tname)
    return buf[off:off + nelems * st.itemsize].view(st)


class Measure:
    """Runs one (collective, size, dtype, op, root, in_place) case on one communicator."""

    def __init__(self, comm, bufs, coll, tname, op, root, in_place, count, timeout=-1.0):
        self.comm, self.bufs, self.coll = comm, bufs, coll
        self.tname, self.op, self.root, self.in_place, self.count = tname, op, root, in_place, count
        self.n, self.rank = comm.size, comm.rank
        self.esize = data.storage(tname).itemsize
        self.timeout = timeout
        self.send_addr, self.recv_addr, self.send_view, self.recv_view = bufs.layout(
            coll, count, self.esize, self.rank, self.n, in_place)

    def run(self, warmup, iters, blocking, barrier=True):
        """Seconds the `iters` timed operations took on this rank (C++ loop, GIL released)."""
        op = data.OPS[self.op] if self.coll.reduces else 0
        scalar = data.MULSUM_SCALAR if self.op == "mulsum" else 1.0
        return _core.perf_loop(self.comm._c, self.coll.name, self.send_addr, self.recv_addr, self.count,
                               data.code(self.tname), op, scalar, self.root, warmup, iters, blocking,
                               self.timeout, barrier)

    def prepare(self):
        """Writes the inputs (and sentinels where results will land)."""
        c, n, t = self.coll, self.n, self.tname
        # Sentinel first: in place, the send region (written next) lies inside the receive one.
        typed(self.recv_view, t, c.recv_count(self.count, n)).view(np.uint8).fill(SENTINEL)
        if c.reads_send(self.rank, self.root):
            send = typed(self.send_view, t, c.send_count(self.count, n))
            for off, tile in c.send_tiles(t, self.op, n, self.rank, self.count):
                data.fill(send[off:off + self.count], t, tile)

    def check(self, blocking):
        """Runs the collective once on fresh inputs; returns the number of wrong elements here."""
        self.prepare()
        self.run(0, 1, blocking, barrier=False)
        recv = typed(self.recv_view, self.tname, self.coll.recv_count(self.count, self.n))
        ulps = 2 if self.op == "avg" and data.is_float(self.tname) else 0
        wrong = 0
        for off, tile in self.coll.expected(self.tname, self.op, self.n, self.rank, self.count, self.root):
            wrong += data.count_wrong(recv[off:off + self.count], self.tname, tile, ulps)
        return wrong
