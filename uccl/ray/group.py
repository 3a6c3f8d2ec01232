"""UcclGroup: uccl behind ray.util.collective's BaseGroup (backend name "uccl").

Ray hands every call its tensors wrapped in lists ([tensor], or [[t0, ..., tN-1]] for the
per-rank lists of allgather/reducescatter); one tensor per process is supported (the
*_multigpu calls pass several and get uccl.InvalidArgument). Tensors are numpy arrays and torch
CPU tensors, used in place without copies where the collective allows it. Errors are uccl's
own (RemoteError naming a dead rank, TimeoutError, MismatchError...); Ray re-raises them in the
caller of ray.get as the cause of its RayTaskError.
"""
import numpy as np
from ray.util.collective.collective_group.base_collective_group import BaseGroup

from uccl.errors import InvalidArgument

from . import _rendezvous

BACKEND = "UCCL"

# ray.util.collective.types.ReduceOp and ray.experimental.util.types.ReduceOp by member name.
_OPS = {"SUM": "sum", "PRODUCT": "prod", "MIN": "min", "MAX": "max", "AVG": "avg"}


def reduce_op(op):
    """uccl's name for a Ray ReduceOp (either of Ray's two enums)."""
    name = getattr(op, "name", str(op)).upper()
    if name not in _OPS:
        raise InvalidArgument(f"uccl ray backend: unsupported reduce op {op!r}")
    return _OPS[name]


def _one(tensors, what):
    if not isinstance(tensors, (list, tuple)) or len(tensors) != 1:
        raise InvalidArgument(f"uccl ray backend {what}: expected one tensor per process, got "
                              f"{len(tensors) if isinstance(tensors, (list, tuple)) else type(tensors).__name__}")
    return tensors[0]


def _copy_into(dst, src):
    """dst[...] = src (same number of elements), for numpy arrays and torch tensors."""
    if isinstance(dst, np.ndarray):
        np.copyto(dst, np.asarray(src).reshape(dst.shape))
    else:
        dst.copy_(src.reshape(dst.shape))


def _flat_view(t, what):
    """A flat view of t that shares its memory (uccl writes through it), or InvalidArgument."""
    contiguous = t.flags.c_contiguous if isinstance(t, np.ndarray) else t.is_contiguous()
    if not contiguous:
        raise InvalidArgument(f"uccl ray backend {what}: the output tensor is not contiguous")
    return t.reshape(-1)


def _concat(tensors):
    """One contiguous flat buffer holding tensors in order (input of reduce_scatter)."""
    if isinstance(tensors[0], np.ndarray):
        return np.concatenate([np.ravel(t) for t in tensors])
    import torch
    return torch.cat([t.reshape(-1) for t in tensors])


class UcclGroup(BaseGroup):
    """One uccl.Communicator per (process, group); created by ray.util.collective."""

    def __init__(self, world_size, rank, group_name):
        super().__init__(world_size, rank, group_name)
        self._comm = _rendezvous.connect(f"collective/{group_name}", rank, world_size)

    @classmethod
    def backend(cls):
        return BACKEND

    @classmethod
    def check_backend_availability(cls):
        return True

    @property
    def communicator(self):
        """The uccl.Communicator behind this group (for split, async ops, describe())."""
        return self._comm

    def destroy_group(self):
        self._comm = None

    def allreduce(self, tensors, allreduce_options=None):
        op = "sum" if allreduce_options is None else reduce_op(allreduce_options.reduceOp)
        self._comm.all_reduce(_one(tensors, "allreduce"), op=op)

    def barrier(self, barrier_options=None):
        self._comm.barrier()

    def reduce(self, tensors, reduce_options=None):
        root = 0 if reduce_options is None else int(reduce_options.root_rank)
        op = "sum" if reduce_options is None else reduce_op(reduce_options.reduceOp)
        self._comm.reduce(_one(tensors, "reduce"), op=op, root=root)

    def broadcast(self, tensors, broadcast_options=None):
        root = 0 if broadcast_options is None else int(broadcast_options.root_rank)
        self._comm.broadcast(_one(tensors, "broadcast"), root=root)

    def allgather(self, tensor_lists, tensors, allgather_options=None):
        outs, x = _one(tensor_lists, "allgather"), _one(tensors, "allgather")
        if len(outs) != self.world_size:
            raise InvalidArgument(f"uccl ray backend allgather: {len(outs)} output tensors for {self.world_size} ranks")
        flat = self._comm.all_gather(x.reshape(-1))
        n = flat.shape[0] // self.world_size
        for i, dst in enumerate(outs):
            if dst.shape != x.shape:
                raise InvalidArgument(f"uccl ray backend allgather: output {i} has shape {tuple(dst.shape)}, "
                                      f"the input {tuple(x.shape)}")
            _copy_into(dst, flat[i * n:(i + 1) * n])

    def reducescatter(self, tensors, tensor_lists, reducescatter_options=None):
        out, ins = _one(tensors, "reducescatter"), _one(tensor_lists, "reducescatter")
        if len(ins) != self.world_size:
            raise InvalidArgument(f"uccl ray backend reducescatter: {len(ins)} input tensors for {self.world_size} ranks")
        for i, t in enumerate(ins):
            if t.shape != out.shape:
                raise InvalidArgument(f"uccl ray backend reducescatter: input {i} has shape {tuple(t.shape)}, "
                                      f"the output {tuple(out.shape)}")
        op = "sum" if reducescatter_options is None else reduce_op(reducescatter_options.reduceOp)
        self._comm.reduce_scatter(_concat(ins), out=_flat_view(out, "reducescatter"), op=op)

    def send(self, tensors, send_options):
        self._comm.send(_one(tensors, "send"), int(send_options.dst_rank))

    def recv(self, tensors, recv_options):
        self._comm.recv(_one(tensors, "recv"), int(recv_options.src_rank))
