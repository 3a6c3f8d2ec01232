"""uccl on Ray: a ray.util.collective backend named "uccl" and a compiled-graph communicator.

    import uccl.ray                          # registers the backend (driver and every actor)
    import ray.util.collective as col

    col.create_collective_group(actors, world_size=4, ranks=[0, 1, 2, 3], backend="uccl",
                                group_name="dp")          # on the driver, or in each actor:
    col.init_collective_group(4, rank, backend="uccl", group_name="dp")
    col.allreduce(x, group_name="dp")                      # in an actor that imported uccl.ray

Ray's registry is per process (ray.util.collective.register_collective_backend, Ray >= 2.50), so
every actor process must register too: importing uccl.ray does it, or start Ray with
``runtime_env={"worker_process_setup_hook": "uccl.ray.register"}`` to do it in every worker.
Rendezvous goes through Ray (see _rendezvous.py): no MASTER_ADDR/MASTER_PORT.

UcclCommunicator (uccl.ray.compiled) is the Communicator for Ray compiled graphs.
"""
from ray.util.collective import register_collective_backend
from ray.util.collective.backend_registry import _global_registry

from .compiled import UcclCommunicator
from .group import BACKEND, UcclGroup


def register():
    """Registers backend "uccl" with this process's ray.util.collective registry (idempotent)."""
    if not _global_registry.is_registered(BACKEND):
        register_collective_backend(BACKEND, UcclGroup)


def group(group_name="default"):
    """The uccl.Communicator behind a ray.util.collective group of this process."""
    from ray.util.collective import get_group_handle
    g = get_group_handle(group_name)
    if not isinstance(g, UcclGroup):
        from uccl.errors import InvalidArgument
        raise InvalidArgument(f"collective group {group_name!r} does not use the uccl backend")
    return g.communicator


register()

__all__ = ["register", "group", "UcclGroup", "UcclCommunicator", "BACKEND"]
