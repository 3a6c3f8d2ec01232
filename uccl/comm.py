"""The Python Communicator: collectives over numpy arrays, buffers, DLPack and torch tensors.

Conventions (those of torch.distributed, which most users know):
  * ``out=None`` means in place where the collective allows it (all_reduce, broadcast, reduce);
    otherwise a new array like the input is allocated and returned.
  * ``async_op=True`` returns a :class:`uccl.work.Work`; ``.wait()`` returns the result.
  * JAX, CuPy and other DLPack / array-API arrays are accepted as ``x`` (and ``out``): results
    come back as the caller's array type (uccl/_interop.py).
  * Device arrays (uccl.sim.SimArray; writable CUDA arrays through __cuda_array_interface__,
    e.g. CuPy's, and torch CUDA tensors when the cuda backend is available) are used in place on
    their device, and outputs uccl allocates are of the input's kind on its device; ``stream=`` orders the
    operation after the work already queued on that stream (default: the device's default
    stream). Arrays of a device uccl has no backend for go through their library's host copy.
  * Operations complete in issue order; every rank must issue the same collectives in the same
    order (a mismatch raises MismatchError naming the ranks and what differed).
"""
import contextlib

import numpy as np

from . import _core
from ._buffers import DTYPE_SIZE, OPS as _OPS, Buffer, as_buffer, op_code
from ._interop import accepts_arrays
from .errors import InvalidArgument, NotSupported
from .sim import SimArray
from .store import as_core_store
from .work import Work

# Kinds of _core.Communicator.blocking_call, the one-call fast path for blocking collectives on
# numpy arrays (python/core/blocking_call.h). It returns False when the buffers do not fit it
# (unusual dtype, wrong sizes, read-only output): the general path below then says why.
# An op the fast path does not know (an int, a torch ReduceOp) is passed as -1: it declines.
_ALL_REDUCE, _ALL_GATHER, _REDUCE_SCATTER, _BROADCAST = 0, 1, 2, 3
_ndarray = np.ndarray


def _stream_handle(stream):
    """The native handle of a `stream=` argument: None (the device's default stream), an int, a
    uccl.sim.Stream (.handle), a torch.cuda.Stream (.cuda_stream) or a CuPy stream (.ptr)."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("handle", "cuda_stream", "ptr"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    raise InvalidArgument(f"stream: {type(stream).__name__} is not a stream (expected a handle, uccl.sim.Stream, "
                          "torch.cuda.Stream or a CuPy stream)")


def _alloc_like(x, count):
    """A new contiguous array/tensor of `count` elements with x's dtype, kind and device."""
    if type(x) is SimArray:
        return SimArray(count, x.dtype, x.device)
    if type(x).__module__.startswith("torch"):
        import torch
        return torch.empty(count, dtype=x.dtype, device=x.device)
    if hasattr(x, "__cuda_array_interface__"):
        return _cuda_alloc_like(x, count)
    arr = x if isinstance(x, np.ndarray) else np.asarray(memoryview(x))
    return np.empty(count, dtype=arr.dtype)


def _cuda_alloc_like(x, count):
    """A CUDA array of x's library on x's device (CuPy; other libraries through the array API)."""
    if type(x).__module__.split(".")[0] == "cupy":
        import cupy
        with cupy.cuda.Device(x.device.id):
            return cupy.empty(count, dtype=x.dtype)
    if hasattr(x, "__array_namespace__"):
        return x.__array_namespace__().empty((count,), dtype=x.dtype, device=x.device)
    raise NotSupported(f"cannot allocate an output like {type(x).__name__} (a CUDA array of an unknown "
                       "library): pass out=")


def _options(transport=None, algorithm=None, socket_ifname=None, timeout=None, name=None):
    d = {}
    for k, v in (("transport", transport), ("algorithm", algorithm), ("socket_ifname", socket_ifname),
                 ("timeout", timeout), ("name", name)):
        if v is not None:
            d[k] = float(v) if k == "timeout" else str(v)
    return d


class Estimate:
    """What Communicator.estimating() added up: predicted ``seconds`` of its ``operations``."""

    __slots__ = ("seconds", "operations")

    def __init__(self):
        self.seconds, self.operations = 0.0, 0

    def __repr__(self):
        return f"<uccl.Estimate {self.operations} operations, {self.seconds * 1e6:.1f} us>"


class Communicator:
    """A group of ranks running collectives together.

    Communicator(rank, size, store, transport=None, algorithm=None, socket_ifname=None, timeout=None)
    Every rank calls it with the same size and store (see uccl.store). uccl.init() builds one
    from a launcher's environment.
    """

    def __init__(self, rank, size, store, *, transport=None, algorithm=None, socket_ifname=None,
                 timeout=None, name=None, _core_comm=None):
        if _core_comm is not None:
            self._c = _core_comm
        else:
            opts = _options(transport, algorithm, socket_ifname, timeout, name)
            self._c = _core.Communicator.create(int(rank), int(size), as_core_store(store), opts)
        self._store = store

    # -- basics ------------------------------------------------------------------------------
    @property
    def rank(self):
        return self._c.rank

    @property
    def size(self):
        return self._c.size

    def describe(self):
        """Peers, the transport chosen per peer, and the listening addresses."""
        return self._c.describe()

    def estimate(self, collective, nbytes, root=0):
        """Predicted seconds of ``collective`` ("all_reduce", "all_gather", ... as uccl.cost
        names them) of ``nbytes`` as this communicator would run it now: the algorithm it would
        choose, on its own topology and link rates. Nothing runs, no peer is asked. nbytes as in
        uccl.cost: the full vector (the gathered output of all_gather, the reduced vector of
        all_reduce / reduce_scatter, one rank's send buffer of all_to_all)."""
        return self._c.estimate(str(collective), float(nbytes), int(root))

    @contextlib.contextmanager
    def estimating(self):
        """Inside the block every operation of this communicator runs nothing and completes at
        once (no buffer is read or written, no message sent), and what uccl predicts for each is
        added up (uccl::Estimator, what torch's dist._time_estimator does on a uccl group):

            with comm.estimating() as est:
                step(comm)                       # the program's collectives, as they are
            print(est.seconds, est.operations)

        At the end of the block an operation that could not be predicted raises (its error),
        unless the block raised already. Meant for one thread: another thread's operations on
        this communicator meanwhile are estimated too."""
        est = _core.Estimator(self._c)
        real, self._c = self._c, est
        result = Estimate()
        ok = False
        try:
            yield result
            ok = True
        finally:
            self._c = real
            result.seconds, result.operations = est.seconds, est.operations
        if ok:
            est.first_error()

    def estimate_p2p(self, sends=(), recvs=()):
        """Predicted seconds of a batch of this rank's messages running at once: ``sends`` and
        ``recvs`` are (peer, nbytes) pairs (peer None: a receive from any source)."""
        ops = [(True, int(n), int(p)) for p, n in sends]
        ops += [(False, int(n), _core.ANY_SOURCE if p is None else int(p)) for p, n in recvs]
        return self._c.estimate_p2p(ops)

    def abort(self, why="abort() called"):
        """Fails every pending operation with AbortedError; usable from any thread."""
        self._c.abort(why)

    def check_error(self):
        """Raises the error that failed this communicator, if any."""
        self._c.error()

    def split(self, color, key=None, **options):
        """Collective: ranks with equal color form a new communicator (None for color < 0)."""
        c = self._c.split(int(color), self.rank if key is None else int(key), _options(**options))
        return None if c is None else Communicator(0, 0, self._store, _core_comm=c)

    def new_group(self, ranks, **options):
        """Every rank calls it with the same list; ranks outside it get None."""
        c = self._c.new_group([int(r) for r in ranks], _options(**options))
        return None if c is None else Communicator(0, 0, self._store, _core_comm=c)

    # -- fault tolerance and elasticity (protocol: cpp/core/agreement.h) ----------------------
    def shrink(self, exclude=None, **options):
        """Collective over the survivors after a failure: they agree on the failed ranks and get
        a new communicator of the survivors (ranks renumbered in order) over a fresh store served
        by its rank 0, so it works when the old store died. This communicator is aborted.

        exclude: ranks to leave out, the same list on every survivor (they need not call, and
        may be alive: torch's shrink_group). The new communicator is then exactly the others;
        if the agreement finds another rank failed too, RemoteError names it on every survivor
        and a second call that lists it as well forms the communicator.

        Raises AbortedError on a rank the others excluded (it did not answer within the
        timeout), TimeoutError when no agreement was reached."""
        if exclude is None:
            c = self._c.shrink(_options(**options))
        else:
            c = self._c.shrink_excluding([int(r) for r in exclude], _options(**options))
        return Communicator(0, 0, None, _core_comm=c)

    def grow(self, new_size, tag, **options):
        """Collective at a step boundary: with new_size - size processes calling
        Communicator.join(store, tag) on this communicator's store, returns the new communicator
        of new_size ranks (current ranks keep their numbers). MismatchError names a version or
        configuration difference."""
        return Communicator(0, 0, self._store, _core_comm=self._c.grow(int(new_size), str(tag), _options(**options)))

    @classmethod
    def join(cls, store, tag, **options):
        """A process started later joins the job's grow(new_size, tag) through its store; returns
        the new communicator (rank = the old size + the order of arrival)."""
        return cls(0, 0, store, _core_comm=_core.Communicator.join(as_core_store(store), str(tag), _options(**options)))

    # -- helpers -----------------------------------------------------------------------------
    def _finish(self, submit, keep, result, async_op, timeout=None):
        """Issues the operation (submit() returns the core's Work) and waits for it unless
        async_op. A blocking call first declares that it will wait (Communicator::will_wait),
        so the background progress thread is not woken to compete with the caller for the
        engine and a core: from Python, 2-rank all_gather of 1 MiB took 87-131 us without
        and ~50 us with it (benchmarks/RESULTS.md)."""
        if async_op:
            return Work(submit(), keep, result)
        token = self._c.will_wait()
        try:
            return Work(submit(), keep, result).wait(timeout)
        finally:
            token.release()

    def _same_dtype(self, what, a, b):
        if a.dtype != b.dtype:
            raise InvalidArgument(f"{what}: input and output dtypes differ")

    def _check_out(self, what, out, inp, count):
        """The output must have the input's dtype and exactly `count` elements: uccl writes
        count elements there, so a smaller buffer would be overrun."""
        self._same_dtype(what, inp, out)
        if out.count != count:
            raise InvalidArgument(f"{what}: output needs {count} elements, has {out.count}")

    # -- collectives -------------------------------------------------------------------------
    # all_reduce, broadcast, all_gather and reduce_scatter try the one-call fast path first,
    # inline (blocking, numpy in and out, no scalar; every Python call costs ~0.1-0.3 us on an
    # 8-byte operation of ~1 us), then the general path, which takes foreign arrays too.
    def all_reduce(self, x, out=None, op="sum", scalar=None, async_op=False, stream=None):
        """Reduces x over all ranks; in place unless out is given. op: sum prod min max avg premul_sum."""
        y = x if out is None else out
        if (type(x) is _ndarray and type(y) is _ndarray and not async_op and scalar is None
                and self._c.blocking_call(_ALL_REDUCE, x, y, _OPS.get(op, -1) if type(op) is str else -1, 0)):
            return y
        return self._all_reduce(x, out=out, op=op, scalar=scalar, async_op=async_op, stream=stream)

    @accepts_arrays
    def _all_reduce(self, x, out, op, scalar, async_op, stream):
        s = as_buffer(x, "all_reduce input", writable=out is None)
        r = s if out is None else as_buffer(out, "all_reduce output", writable=True)
        self._same_dtype("all_reduce", s, r)
        if r.count != s.count:
            raise InvalidArgument(f"all_reduce: output has {r.count} elements, input {s.count}")
        submit = lambda: self._c.all_reduce(s.addr, r.addr, s.count, s.dtype, op_code(op), 1.0 if scalar is None else float(scalar), _stream_handle(stream))
        return self._finish(submit, (s, r), r.owner, async_op)

    @accepts_arrays
    def reduce(self, x, out=None, op="sum", root=0, scalar=None, async_op=False, stream=None):
        """Reduces to `root` (in place there unless out is given); other ranks' x is unchanged."""
        s = as_buffer(x, "reduce input", writable=out is None and self.rank == root)
        r = s if out is None else as_buffer(out, "reduce output", writable=True)
        if self.rank == root:
            self._check_out("reduce", r, s, s.count)
        submit = lambda: self._c.reduce(s.addr, r.addr, s.count, s.dtype, op_code(op), 1.0 if scalar is None else float(scalar), int(root), _stream_handle(stream))
        return self._finish(submit, (s, r), r.owner, async_op)

    def broadcast(self, x, root=0, out=None, async_op=False, stream=None):
        """Copies root's x to every rank (into x itself unless out is given)."""
        y = x if out is None else out
        if (type(x) is _ndarray and type(y) is _ndarray and not async_op and type(root) is int
                and self._c.blocking_call(_BROADCAST, x, y, 0, root)):
            return y
        return self._broadcast(x, root=root, out=out, async_op=async_op, stream=stream)

    @accepts_arrays
    def _broadcast(self, x, root, out, async_op, stream):
        s = as_buffer(x, "broadcast buffer", writable=out is None)
        r = s if out is None else as_buffer(out, "broadcast output", writable=True)
        self._check_out("broadcast", r, s, s.count)
        submit = lambda: self._c.broadcast(s.addr, r.addr, s.count, s.dtype, int(root), _stream_handle(stream))
        return self._finish(submit, (s, r), r.owner, async_op)

    def all_gather(self, x, out=None, async_op=False, stream=None):
        """Concatenates every rank's x in rank order (out has size * len(x) elements)."""
        if type(x) is _ndarray and type(out) is _ndarray and not async_op and self._c.blocking_call(_ALL_GATHER, x, out, 0, 0):
            return out
        return self._all_gather(x, out=out, async_op=async_op, stream=stream)

    @accepts_arrays
    def _all_gather(self, x, out, async_op, stream):
        s = as_buffer(x, "all_gather input")
        out = _alloc_like(s.owner, s.count * self.size) if out is None else out
        r = as_buffer(out, "all_gather output", writable=True)
        self._same_dtype("all_gather", s, r)
        if r.count != s.count * self.size:
            raise InvalidArgument(f"all_gather: output needs {s.count * self.size} elements, has {r.count}")
        submit = lambda: self._c.all_gather(s.addr, r.addr, s.count, s.dtype, _stream_handle(stream))
        return self._finish(submit, (s, r), r.owner, async_op)

    @accepts_arrays
    def all_gather_v(self, x, counts, out=None, displs=None, async_op=False, stream=None):
        """all_gather with per-rank element counts (and optional displacements)."""
        s = as_buffer(x, "all_gather_v input")
        counts = [int(c) for c in counts]
        if len(counts) != self.size or s.count != counts[self.rank]:
            raise InvalidArgument(f"all_gather_v: counts must have {self.size} entries and counts[{self.rank}] "
                                  f"must equal the input's {s.count} elements")
        out = _alloc_like(s.owner, sum(counts)) if out is None else out
        r = as_buffer(out, "all_gather_v output", writable=True)
        extent = max((int(d) + c for d, c in zip(displs, counts)), default=0) if displs else sum(counts)
        self._same_dtype("all_gather_v", s, r)
        if r.count < extent:
            raise InvalidArgument(f"all_gather_v: output needs {extent} elements, has {r.count}")
        submit = lambda: self._c.all_gather_v(s.addr, r.addr, counts, [int(d) for d in (displs or [])], s.dtype, _stream_handle(stream))
        return self._finish(submit, (s, r), r.owner, async_op)

    def reduce_scatter(self, x, out=None, op="sum", scalar=None, async_op=False, stream=None):
        """Reduces x over ranks and leaves block `rank` (len(x) / size elements) in out."""
        if (type(x) is _ndarray and type(out) is _ndarray and not async_op and scalar is None
                and self._c.blocking_call(_REDUCE_SCATTER, x, out, _OPS.get(op, -1) if type(op) is str else -1, 0)):
            return out
        return self._reduce_scatter(x, out=out, op=op, scalar=scalar, async_op=async_op, stream=stream)

    @accepts_arrays
    def _reduce_scatter(self, x, out, op, scalar, async_op, stream):
        s = as_buffer(x, "reduce_scatter input")
        if s.count % self.size:
            raise InvalidArgument(f"reduce_scatter: input of {s.count} elements is not divisible by {self.size} "
                                  "ranks (use reduce_scatter_v)")
        n = s.count // self.size
        out = _alloc_like(s.owner, n) if out is None else out
        r = as_buffer(out, "reduce_scatter output", writable=True)
        self._same_dtype("reduce_scatter", s, r)
        if r.count != n:
            raise InvalidArgument(f"reduce_scatter: output needs {n} elements, has {r.count}")
        submit = lambda: self._c.reduce_scatter(s.addr, r.addr, n, s.dtype, op_code(op), 1.0 if scalar is None else float(scalar), _stream_handle(stream))
        return self._finish(submit, (s, r), r.owner, async_op)

    @accepts_arrays
    def reduce_scatter_v(self, x, counts, out=None, op="sum", scalar=None, async_op=False, stream=None):
        """reduce_scatter with per-rank block sizes (blocks packed in rank order in x)."""
        s = as_buffer(x, "reduce_scatter_v input")
        counts = [int(c) for c in counts]
        if len(counts) != self.size or sum(counts) != s.count:
            raise InvalidArgument(f"reduce_scatter_v: counts must have {self.size} entries summing to {s.count}")
        out = _alloc_like(s.owner, counts[self.rank]) if out is None else out
        r = as_buffer(out, "reduce_scatter_v output", writable=True)
        self._check_out("reduce_scatter_v", r, s, counts[self.rank])
        submit = lambda: self._c.reduce_scatter_v(s.addr, r.addr, counts, s.dtype, op_code(op), 1.0 if scalar is None else float(scalar), _stream_handle(stream))
        return self._finish(submit, (s, r), r.owner, async_op)

    @accepts_arrays
    def all_to_all(self, x, out=None, async_op=False, stream=None):
        """Block j of x goes to rank j; block i of out came from rank i."""
        s = as_buffer(x, "all_to_all input")
        if s.count % self.size:
            raise InvalidArgument(f"all_to_all: {s.count} elements are not divisible by {self.size} ranks")
        out = _alloc_like(s.owner, s.count) if out is None else out
        r = as_buffer(out, "all_to_all output", writable=True)
        self._check_out("all_to_all", r, s, s.count)
        submit = lambda: self._c.all_to_all(s.addr, r.addr, s.count // self.size, s.dtype, _stream_handle(stream))
        return self._finish(submit, (s, r), r.owner, async_op)

    @accepts_arrays
    def all_to_all_v(self, x, send_counts, recv_counts, out=None, send_displs=None, recv_displs=None,
                     async_op=False, stream=None):
        """all_to_all with per-peer counts (packed in rank order unless displacements are given)."""
        s = as_buffer(x, "all_to_all_v input")
        sc, rc = [int(c) for c in send_counts], [int(c) for c in recv_counts]
        sd = [int(d) for d in send_displs] if send_displs is not None else list(np.cumsum([0] + sc[:-1]))
        rd = [int(d) for d in recv_displs] if recv_displs is not None else list(np.cumsum([0] + rc[:-1]))
        out = _alloc_like(s.owner, sum(rc)) if out is None else out
        r = as_buffer(out, "all_to_all_v output", writable=True)
        self._same_dtype("all_to_all_v", s, r)
        if len(sc) != self.size or len(rc) != self.size:
            raise InvalidArgument(f"all_to_all_v: send_counts and recv_counts need {self.size} entries")
        if max((d + c for d, c in zip(sd, sc)), default=0) > s.count:
            raise InvalidArgument("all_to_all_v: send counts/displacements run past the input")
        if max((d + c for d, c in zip(rd, rc)), default=0) > r.count:
            raise InvalidArgument("all_to_all_v: receive counts/displacements run past the output")
        submit = lambda: self._c.all_to_all_v(s.addr, r.addr, sc, [int(v) for v in sd], rc, [int(v) for v in rd], s.dtype, _stream_handle(stream))
        return self._finish(submit, (s, r), r.owner, async_op)

    @accepts_arrays
    def gather(self, x, out=None, root=0, async_op=False, stream=None):
        """Concatenates every rank's x at root (returns None elsewhere)."""
        s = as_buffer(x, "gather input")
        r = None
        if self.rank == root:
            out = _alloc_like(s.owner, s.count * self.size) if out is None else out
            r = as_buffer(out, "gather output", writable=True)
            self._check_out("gather", r, s, s.count * self.size)
        submit = lambda: self._c.gather(s.addr, r.addr if r else 0, s.count, s.dtype, int(root), _stream_handle(stream))
        return self._finish(submit, (s, r), r.owner if r else None, async_op)

    @accepts_arrays
    def scatter(self, x, out=None, root=0, count=None, dtype="float32", async_op=False, stream=None):
        """Block i of root's x goes to rank i. Non-roots pass x=None and out (or count and dtype;
        a dtype that differs from the root's raises MismatchError)."""
        if self.rank == root:
            s = as_buffer(x, "scatter input")
            if s.count % self.size:
                raise InvalidArgument(f"scatter: {s.count} elements are not divisible by {self.size} ranks")
            n = s.count // self.size
            out = _alloc_like(s.owner, n) if out is None else out
        else:
            s = None
            if out is None:
                if count is None:
                    raise InvalidArgument("scatter: non-root ranks must pass out, or count and dtype")
                out = np.empty(int(count), dtype=np.dtype(dtype))
        r = as_buffer(out, "scatter output", writable=True)
        if s is not None:
            self._check_out("scatter", r, s, s.count // self.size)
        submit = lambda: self._c.scatter(s.addr if s else 0, r.addr, r.count, r.dtype, int(root), _stream_handle(stream))
        return self._finish(submit, (s, r), r.owner, async_op)

    def _peer(self, peer, what):
        # The core reads a negative peer of a receive as "any source" (torch's recv without
        # src); this API has no way to report the sender, so a negative rank is refused here.
        p = int(peer)
        if p < 0:
            raise InvalidArgument(f"{what}: peer {p} out of range for {self.size} ranks")
        return p

    @accepts_arrays
    def send(self, x, peer, tag=0, async_op=False, stream=None):
        b = as_buffer(x, "send buffer")
        p = self._peer(peer, "send")
        return self._finish(lambda: self._c.p2p([(True, b.addr, b.count, b.dtype, p, int(tag))], _stream_handle(stream)), (b,), None, async_op)

    @accepts_arrays
    def recv(self, x, peer, tag=0, async_op=False, stream=None):
        b = as_buffer(x, "recv buffer", writable=True)
        p = self._peer(peer, "recv")
        return self._finish(lambda: self._c.p2p([(False, b.addr, b.count, b.dtype, p, int(tag))], _stream_handle(stream)), (b,), b.owner,
                            async_op)

    def batch_isend_irecv(self, ops, stream=None):
        """ops: iterable of ("send"|"recv", buffer, peer[, tag]); all posted together. Returns a Work."""
        bufs, plan = [], []
        for item in ops:
            kind, buf, peer = item[0], item[1], item[2]
            tag = item[3] if len(item) > 3 else 0
            if kind not in ("send", "recv"):
                raise InvalidArgument(f"batch_isend_irecv: unknown op {kind!r} (expected 'send' or 'recv')")
            b = as_buffer(buf, f"{kind} buffer", writable=kind == "recv")
            bufs.append(b)
            plan.append((kind == "send", b.addr, b.count, b.dtype, self._peer(peer, kind), int(tag)))
        return Work(self._c.p2p(plan, _stream_handle(stream)), bufs, None)

    def barrier(self, async_op=False, timeout=None):
        return self._finish(lambda: self._c.barrier(), (), None, async_op, timeout)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """A barrier that names who did not come (Gloo's monitored barrier): on rank 0,
        TimeoutError whose .peer is the lowest rank that did not arrive within ``timeout``
        seconds (None: the communicator's), the message naming all of them with
        ``wait_all_ranks``; RemoteError for a rank that died. The others raise (peer 0) when rank
        0 does not answer within twice the timeout. A timeout fails the communicator."""
        self._c.monitored_barrier(-1.0 if timeout is None else float(timeout), bool(wait_all_ranks))
