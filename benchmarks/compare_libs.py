"""The three contenders of benchmarks/compare.py, behind one interface.

Each runner times `iters` back-to-back operations of one collective on buffers it is given and
returns the seconds per operation on this rank. All three work on the *same* numpy memory
(Gloo through torch.from_numpy, which shares it), so page placement and cache state are the
same for everyone; they run one after the other, never at once.

  * uccl: by default a Python loop of blocking calls of uccl's Python API, on the same footing
    as the other two (loop="python"); loop="cpp" times uccl-perf's C++ loop (_core.perf_loop)
    instead, which shows what the library costs without the Python call. blocking=True (C++
    loop) waits for each operation before the next, like the other two.
  * Gloo: torch.distributed with backend "gloo" on CPU tensors; a Python loop of blocking calls.
  * Open MPI: mpi4py's buffer methods (Allreduce, ...); a Python loop of blocking calls. mpi4py
    adds well under a microsecond per call; it is part of "MPI from Python" and it is noted in
    RESULTS.md where it matters (8-byte latency).
Gloo's all_reduce/broadcast/reduce work in place (its only mode); uccl and MPI run
out-of-place where the collective has both (nccl-tests' out-of-place column).
"""
import time

import numpy as np

from uccl.perf import bench, data


def _np(buf, tname, n):
    return buf[:n * data.storage(tname).itemsize].view(data.storage(tname))


class UcclRunner:
    name = "uccl"

    def __init__(self, comm, blocking=True, loop="python"):
        self.comm, self.blocking, self.loop = comm, blocking, loop

    def setup(self, coll, count, tname, op, send, recv):
        if self.loop == "cpp":
            bufs = bench.Buffers(max(len(send), len(recv)), send=send, recv=recv)
            self.m = bench.Measure(self.comm, bufs, coll, tname, op, 0, False, count)
            return
        c, n, rank = self.comm, self.comm.size, self.comm.rank
        s = _np(send, tname, coll.send_count(count, n))
        r = _np(recv, tname, coll.recv_count(count, n))
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        self.fn = {
            "all_reduce": lambda: c.all_reduce(s, r, op=op),
            "all_gather": lambda: c.all_gather(s, r),
            "reduce_scatter": lambda: c.reduce_scatter(s, r, op=op),
            "broadcast": lambda: c.broadcast(r if rank else s, root=0),
            "reduce": lambda: c.reduce(s, r, op=op, root=0),
            "alltoall": lambda: c.all_to_all(s, r),
            "gather": lambda: c.gather(s, r if rank == 0 else None, root=0),
            "scatter": lambda: c.scatter(s if rank == 0 else None, r, root=0),
            "sendrecv": lambda: c.batch_isend_irecv([("send", s, nxt), ("recv", r, prv)]).wait(),
        }[coll.name]

    def time(self, warmup, iters):
        if self.loop == "cpp":
            return self.m.run(warmup, iters, self.blocking) / iters
        fn = self.fn
        for _ in range(warmup):
            fn()
        self.comm.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) / iters


class MpiRunner:
    name = "mpi"

    def __init__(self, mpi_comm):
        from mpi4py import MPI
        self.MPI, self.c = MPI, mpi_comm

    def setup(self, coll, count, tname, op, send, recv):
        MPI, c, n = self.MPI, self.c, self.c.size
        s = _np(send, tname, coll.send_count(count, n))
        r = _np(recv, tname, coll.recv_count(count, n))
        mop = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}.get(op, MPI.SUM)
        nxt, prv = (c.rank + 1) % n, (c.rank - 1) % n
        self.fn = {
            "all_reduce": lambda: c.Allreduce(s, r, op=mop),
            "all_gather": lambda: c.Allgather(s, r),
            "reduce_scatter": lambda: c.Reduce_scatter_block(s, r, op=mop),
            "broadcast": lambda: c.Bcast(r if c.rank else s, root=0),
            "reduce": lambda: c.Reduce(s, r, op=mop, root=0),
            "alltoall": lambda: c.Alltoall(s, r),
            "gather": lambda: c.Gather(s, r, root=0),
            "scatter": lambda: c.Scatter(s, r, root=0),
            "sendrecv": lambda: c.Sendrecv(s, dest=nxt, recvbuf=r, source=prv),
        }[coll.name]

    def time(self, warmup, iters):
        fn = self.fn
        for _ in range(warmup):
            fn()
        self.c.Barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) / iters


class GlooRunner:
    name = "gloo"

    def __init__(self, rank, size, addr, port):
        import datetime

        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)  # two cores: no intra-op thread pool spinning beside the ranks
        self.torch, self.dist = torch, dist
        dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=600))
        self.rank, self.size = rank, size

    def setup(self, coll, count, tname, op, send, recv):
        torch, dist, n, rank = self.torch, self.dist, self.size, self.rank
        s = torch.from_numpy(_np(send, tname, coll.send_count(count, n)))
        r = torch.from_numpy(_np(recv, tname, coll.recv_count(count, n)))
        rop = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
               "max": dist.ReduceOp.MAX}.get(op, dist.ReduceOp.SUM)
        blocks_r = list(r.chunk(n)) if coll.recv_mult and count else None
        blocks_s = list(s.chunk(n)) if coll.send_mult and count else None
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        # torch 2.13 renamed the tensor variants (the old names warn on every call).
        all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

        def sendrecv():
            for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, s, nxt), dist.P2POp(dist.irecv, r, prv)]):
                w.wait()

        self.fn = {
            "all_reduce": lambda: dist.all_reduce(r, op=rop),
            "all_gather": lambda: all_gather(r, s),
            "reduce_scatter": lambda: reduce_scatter(r, s, op=rop),
            "broadcast": lambda: dist.broadcast(r, src=0),
            "reduce": lambda: dist.reduce(r, dst=0, op=rop),
            "alltoall": lambda: dist.all_to_all_single(r, s),
            "gather": lambda: dist.gather(s, blocks_r if rank == 0 else None, dst=0),
            "scatter": lambda: dist.scatter(r, blocks_s if rank == 0 else None, src=0),
            "sendrecv": sendrecv,
        }[coll.name]
        if count == 0:
            self.fn = lambda: None  # torch refuses some empty collectives; nothing to time

    def time(self, warmup, iters):
        fn = self.fn
        for _ in range(warmup):
            fn()
        self.dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) / iters

    def close(self):
        self.dist.destroy_process_group()


def shared_buffers(nbytes, tname):
    """One send and one receive buffer, page aligned and written (never-written pages all map
    the kernel's zero page, which reads impossibly fast); inputs are 1, no denormals."""
    send, recv = bench.aligned(max(nbytes, 64)), bench.aligned(max(nbytes, 64))
    st = data.storage(tname)
    k = len(send) // st.itemsize
    send[:k * st.itemsize].view(st)[:] = data.to_storage(tname, np.ones(1))[0]
    recv[:k * st.itemsize].view(st)[:] = data.to_storage(tname, np.ones(1))[0]
    return send, recv


def combine(mpi_comm, sec):
    """Average over ranks (nccl-tests' default -a 1), through MPI, outside any timed region."""
    from mpi4py import MPI
    x = np.array([sec], dtype=np.float64)
    mpi_comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)
    return float(x[0]) / mpi_comm.size
