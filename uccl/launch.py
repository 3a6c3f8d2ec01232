"""uccl.init(): a Communicator from whatever launched this process.

Recognised launchers, in order:
  * torchrun / torch elastic: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT. The agent already
    serves a TCPStore there (TORCHELASTIC_USE_AGENT_STORE=True): uccl joins it through torch
    instead of binding the port itself.
  * Open MPI: OMPI_COMM_WORLD_RANK / _SIZE. Rank 0 starts uccl's store on a free port and the
    address is broadcast with mpi4py when it is importable, else MASTER_ADDR/MASTER_PORT.
  * Slurm: SLURM_PROCID / SLURM_NTASKS, with MASTER_ADDR/MASTER_PORT.
  * Plain RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT: rank 0 serves uccl's store on MASTER_PORT.
  * Nothing: a single-rank communicator.
"""
import os
import socket

from .comm import Communicator
from .errors import InvalidArgument
from .store import PrefixStore, TcpStore

_init_count = 0


def _env_int(*names):
    for n in names:
        if os.environ.get(n) not in (None, ""):
            return int(os.environ[n])
    return None


def _master():
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port:
        raise InvalidArgument("MASTER_ADDR and MASTER_PORT must be set for this launcher "
                              "(or pass store= to uccl.init)")
    return addr, int(port)


def _torch_agent_store(addr, port, size, timeout):
    import datetime

    import torch.distributed as dist
    extra = {"use_libuv": True} if _tcpstore_takes_libuv() else {}
    return dist.TCPStore(addr, port, size, is_master=False, timeout=datetime.timedelta(seconds=timeout), **extra)


def _tcpstore_takes_libuv():
    try:
        import inspect

        import torch.distributed as dist
        return "use_libuv" in str(inspect.signature(dist.TCPStore.__init__))
    except (ValueError, TypeError, ImportError):
        return False


def _mpi_store(rank, timeout):
    """Rank 0 serves uccl's store; its address travels through MPI_Bcast."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    server = TcpStore("*", 0, is_server=True, timeout=timeout) if rank == 0 else None
    addr = (socket.gethostname(), server.port) if rank == 0 else None
    host, port = comm.bcast(addr, root=0)
    return server if rank == 0 else TcpStore(host, port, timeout=timeout)


def init(rank=None, world_size=None, store=None, timeout=None, **options):
    """Creates the world Communicator from the launcher's environment (see module doc).

    Explicit rank/world_size/store win over the environment. Options: transport, algorithm,
    socket_ifname, name.
    """
    global _init_count
    env = os.environ
    t = float(timeout if timeout is not None else env.get("UCCL_TIMEOUT_S", 600))
    if rank is None:
        rank = _env_int("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
    if world_size is None:
        world_size = _env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
    if rank is None or world_size is None:
        rank, world_size = 0, 1
    if store is None:
        if world_size == 1:
            store = TcpStore("127.0.0.1", 0, is_server=True, timeout=t)
        elif env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and "MASTER_PORT" in env:
            store = _torch_agent_store(*_master(), world_size, t)
        elif "OMPI_COMM_WORLD_RANK" in env and "MASTER_PORT" not in env:
            store = _mpi_store(rank, t)
        else:
            addr, port = _master()
            store = TcpStore(addr, port, is_server=(rank == 0), timeout=t)
    # A fresh key space per init() call, so one store can bootstrap several worlds in a row.
    from .store import as_core_store
    base = as_core_store(store)
    prefixed = PrefixStore(base, f"uccl-init{_init_count}/")
    _init_count += 1
    comm = Communicator(rank, world_size, prefixed, timeout=t, **options)
    comm._store_owner = store  # keeps a served store alive as long as the communicator
    return comm
