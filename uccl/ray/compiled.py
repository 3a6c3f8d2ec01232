"""UcclCommunicator: uccl behind Ray compiled graphs' Communicator interface.

    comm = UcclCommunicator(actors)                      # on the driver
    with InputNode() as inp:
        outs = [a.compute.bind(inp) for a in actors]
        outs = ray.experimental.collective.allreduce.bind(outs, transport=comm)
        dag = MultiOutputNode(outs)
    compiled = dag.experimental_compile()

Ray (2.60) treats a custom communicator as an accelerator communicator unless it is a
CPUCommunicator: only then may the actors have no GPU (the check in
ray.experimental.channel.torch_tensor_accelerator_channel._init_communicator), and its
transport name must be "cpu" because the "accelerator" channel refuses CPU tensors. So this class
derives from CPUCommunicator and names itself "cpu". What travels over uccl in a compiled graph on
CPUs: the collective nodes (allreduce, allgather, reducescatter). Point-to-point edges between
actors with a "cpu" communicator use Ray's shared-memory channel (Ray's choice, not ours);
send/recv here are complete and are what an accelerator build of the graph calls.
"""
import uuid

from ray.experimental.channel.cpu_communicator import CPUCommunicator

from . import _rendezvous
from .group import reduce_op


class UcclCommunicator(CPUCommunicator):
    """A uccl communicator over the given actors (rank = position in the list)."""

    def __init__(self, actor_handles, timeout=None, **options):
        super().__init__(len(actor_handles), list(actor_handles))
        self._id = self.generate_communicator_id()
        self._timeout = timeout
        self._options = options
        self._comm = None

    def __getstate__(self):
        # Shipped to every actor by Ray before initialize(); never with a live communicator.
        state = dict(self.__dict__)
        state["_comm"] = None
        return state

    def initialize(self, rank):
        super().initialize(rank)
        self._comm = _rendezvous.connect(f"compiled/{self._id}", rank, self._world_size, self._timeout,
                                         **self._options)

    @property
    def communicator(self):
        return self._comm

    def send(self, value, peer_rank):
        self._comm.send(value, int(peer_rank))

    def recv(self, shape, dtype, peer_rank, allocator=None):
        if allocator is None:
            import torch
            buf = torch.empty(shape, dtype=dtype)
        else:
            buf = allocator(shape, dtype)
        self._comm.recv(buf, int(peer_rank))
        return buf

    def allreduce(self, send_buf, recv_buf, op=None):
        self._comm.all_reduce(send_buf, out=recv_buf, op="sum" if op is None else reduce_op(op))

    def allgather(self, send_buf, recv_buf):
        self._comm.all_gather(send_buf, out=recv_buf)

    def reducescatter(self, send_buf, recv_buf, op=None):
        self._comm.reduce_scatter(send_buf, out=recv_buf, op="sum" if op is None else reduce_op(op))

    def destroy(self):
        self._comm = None

    def get_transport_name(self):
        return "cpu"

    @classmethod
    def generate_communicator_id(cls):
        return f"uccl-{uuid.uuid4()}"
