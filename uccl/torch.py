"""uccl.torch: uccl's torch backend outside ``init_process_group``, and a process group that is
reconfigured the way torchft expects.

torchft keeps a data-parallel job running across failures without restarting processes: when a
replica dies (or a new one joins) every survivor aborts its process group and configures a new
one over a fresh store prefix, with its new rank and world size. ``ReconfigurableProcessGroup``
is that group for uccl::

    pg = uccl.torch.ReconfigurableProcessGroup(timeout=timedelta(seconds=30))
    pg.configure("10.0.0.1:29500", "step7", rank, world_size)   # or any torch Store
    pg.allreduce([grad], dist.AllreduceOptions()).wait()        # or dist.all_reduce(grad, group=pg)
    ...                                                         # a peer dies: the wait raises
    pg.errored()          # uccl.RemoteError naming the dead rank (.peer), or None
    pg.configure(store, "step8", new_rank, new_world_size)     # aborts the old group first

Why a wrapper and not torch's own group object: torch's ProcessGroup has a fixed rank and size
for life, so the wrapper keeps one current group (``process_group``: a plain torch ProcessGroup
over a uccl backend, usable with DDP) and forwards every op to it. Errors carry uccl's codes:
``configure`` raises ``uccl.InvalidArgument`` (a rank claimed twice, world sizes that differ:
checked on the store before uccl's rendezvous, python/torch/membership.h), ``uccl.TimeoutError``
(a member never came, naming it), ``uccl.RemoteError``; ops raise torch's DistBackendError as
every torch backend does, and ``errored()`` gives the typed error of the failure with its peer.

``create_backend`` / ``create_process_group`` make one uccl group from any torch Store, like
``torch.distributed.ProcessGroupGloo(store, rank, size, timeout)``, without touching torch's
global group registry.
"""
from __future__ import annotations

import datetime
import threading
import time
from typing import Any, Optional, Union

import torch
import torch.distributed as dist

from . import errors as _errors
from ._torch_backend import BACKEND_NAME, ProcessGroupOptions, _DeviceTypes, _seconds

Timeout = Union[float, datetime.timedelta, None]

# uccl/errors.py's classes by the C++ code (include/uccl/status.h).
_CLASSES = {
    1: _errors.InvalidArgument,
    2: _errors.NotSupported,
    3: _errors.TimeoutError,
    4: _errors.RemoteError,
    5: _errors.MismatchError,
    6: _errors.AbortedError,
    9: _errors.AuthenticationError,
}


def _typed(status: tuple, context: str) -> _errors.UcclError:
    code, peer, message = status
    return _CLASSES.get(code, _errors.UcclError)(f"{context}: {message}", code, peer)


# uccl's record of a failing rank in its group's store (cpp/core/connection_failures.cc): every
# rank whose communicator fails publishes it before closing its connections; a dead one cannot.
_FAILED_KEY = "uccl/failed/{}"


def _origin(err: _errors.UcclError, store: dist.Store, size: int, me: int, settle_s: float = 0.3,
            limit_s: float = 2.0) -> _errors.UcclError:
    """The rank a failure started from. uccl names the peer whose connection failed; when that
    peer is alive and failed itself (its record is in the store: a cascade, e.g. it closed its
    connections because a third rank died), the rank that started it is one that published no
    record once the others' records stopped coming (they all arrive within milliseconds: every
    failing rank publishes before it closes, and its closing fails the rest)."""
    if not isinstance(err, _errors.RemoteError) or err.peer is None or err.peer == me:
        return err
    if not store.check([_FAILED_KEY.format(err.peer)]):
        return err  # the named peer published nothing: it is the one that went away
    end, last, since = time.monotonic() + limit_s, None, time.monotonic()
    while True:
        silent = [r for r in range(size) if r != me and not store.check([_FAILED_KEY.format(r)])]
        now = time.monotonic()
        if silent != last:
            last, since = silent, now
        if not silent or now - since >= settle_s or now >= end:
            break
        time.sleep(0.02)
    if not silent:
        return err
    return _errors.RemoteError(f"{err}; rank {silent[0]} started it: it published no failure record (it is gone)"
                               + (f", nor did ranks {silent[1:]}" if len(silent) > 1 else ""), err.code, silent[0])


def _invalid(message: str) -> _errors.InvalidArgument:
    return _errors.InvalidArgument(f"uccl.torch: {message}", 1, None)


def _ext() -> Any:
    try:
        from . import _torch as ext
    except ImportError as e:
        raise _errors.NotSupported(f"uccl was built without its torch backend (uccl._torch): {e}") from e
    return ext


def create_backend(store: dist.Store, rank: int, size: int, timeout: Timeout = None,
                   options: Optional[ProcessGroupOptions] = None) -> Any:
    """A uccl c10d Backend (``uccl._torch.ProcessGroupUCCL``) over ``store``; every rank calls it.

    Like ``ProcessGroupGloo(store, rank, size, timeout)``. ``store`` is used as given: wrap it in a
    ``torch.distributed.PrefixStore`` of its own for every group. Raises uccl's typed errors
    (InvalidArgument, TimeoutError, RemoteError...) with ``.peer`` naming the rank at fault."""
    if not isinstance(store, dist.Store):
        raise _invalid(f"store must be a torch.distributed.Store, got {type(store).__name__}")
    if isinstance(rank, bool) or not isinstance(rank, int) or isinstance(size, bool) or not isinstance(size, int):
        raise _invalid(f"rank and size must be integers, got {rank!r} and {size!r}")
    if size < 1 or not 0 <= rank < size:
        raise _invalid(f"rank {rank} is outside a group of size {size}")
    opts = options if options is not None else ProcessGroupOptions()
    if not isinstance(opts, ProcessGroupOptions):
        raise _invalid(f"options must be a uccl.ProcessGroupOptions, got {type(opts).__name__}")
    t = opts.timeout if opts.timeout is not None else timeout
    backend, err = _ext()._create(store, rank, size, _seconds(t), opts.transport or "", opts.algorithm or "",
                                  opts.socket_ifname or "", "")
    if err is not None:
        raise _typed(err, f"uccl group (rank {rank} of {size})")
    return backend


def _wrap(backend: Any, store: dist.Store, rank: int, size: int) -> dist.ProcessGroup:
    pg = dist.ProcessGroup(store, rank, size)
    custom = dist.ProcessGroup.BackendType.CUSTOM
    pg._set_default_backend(custom)
    for dev in _DeviceTypes(["cpu"]):  # cpu and the accelerator torch reports (staged through host)
        pg._register_backend(torch.device(dev), custom, backend)
    return pg


def create_process_group(store: dist.Store, rank: int, size: int, timeout: Timeout = None,
                         options: Optional[ProcessGroupOptions] = None) -> dist.ProcessGroup:
    """A torch ProcessGroup over one uccl backend (see create_backend), outside torch's registry:
    pass it as ``group=`` to ``torch.distributed`` calls or as DDP's ``process_group``."""
    return _wrap(create_backend(store, rank, size, timeout, options), store, rank, size)


def _forward(name: str) -> Any:
    def op(self: "ReconfigurableProcessGroup", *args: Any, **kwargs: Any) -> Any:
        return getattr(self._current(name), name)(*args, **kwargs)

    op.__name__ = name
    op.__doc__ = f"ProcessGroup.{name} on the current uccl group (raises if none is configured)."
    return op


class ReconfigurableProcessGroup(dist.ProcessGroup):
    """A process group that is reconfigured in place (torchft's ``configure / abort / errored``).

    timeout: the ops' and the rendezvous' timeout; options: a uccl.ProcessGroupOptions.
    Thread safe: ``abort()`` may be called from another thread (a watchdog) while an op waits.
    """

    def __init__(self, timeout: Timeout = datetime.timedelta(seconds=60),
                 options: Optional[ProcessGroupOptions] = None) -> None:
        super().__init__(0, 1)
        self._timeout = timeout
        self._options = options
        self._lock = threading.Lock()
        self._pg: Optional[dist.ProcessGroup] = None
        self._backend: Any = None
        self._group_store: Optional[dist.Store] = None
        self._error: Optional[Exception] = None
        self._stores: dict = {}  # "host:port" -> TCPStore client, reused by every configure
        self._rank, self._size, self._prefix = 0, 1, None

    # -- torchft's interface ------------------------------------------------------------------
    def configure(self, store: Union[str, dist.Store], prefix: str, rank: int, world_size: int,
                  timeout: Timeout = None) -> None:
        """Aborts the current group, then makes a new one: every member calls it with the same
        ``prefix`` (new for every configuration: the keys of one group are never reused), its own
        ``rank`` and the same ``world_size``. ``store``: a torch Store, or "host:port[/prefix]" of
        a TCPStore server (one client per address, kept across configurations). Blocks until every
        member arrived; raises uccl's typed errors (see the module docstring)."""
        if not isinstance(prefix, str) or not prefix:
            raise _invalid(f"configure needs a non-empty prefix string, got {prefix!r}")
        self.abort()
        base = self._store_for(store, timeout)
        group_store = dist.PrefixStore(prefix, base)  # keys "<prefix>/..."
        with self._lock:
            self._error = None
        try:
            backend = create_backend(group_store, rank, world_size, timeout if timeout is not None else self._timeout,
                                     self._options)
        except _errors.UcclError as e:
            with self._lock:
                self._error = e
            raise
        pg = _wrap(backend, group_store, rank, world_size)
        with self._lock:
            self._pg, self._backend, self._group_store = pg, backend, group_store
            self._rank, self._size, self._prefix = rank, world_size, prefix

    def abort(self) -> None:
        """Ends the current group at once: its pending works complete with DistBackendError, its
        connections, threads and shared memory are released. Never blocks; idempotent."""
        self._release(abort=True)

    def shutdown(self) -> None:
        """Lets go of the current group (no failure forced on pending works) and of the store
        clients configure() opened."""
        self._release(abort=False)
        with self._lock:
            self._stores.clear()

    def errored(self) -> Optional[Exception]:
        """The typed uccl error (``.code``, ``.peer``) of the current group's failure, or of the
        last failed configure / the failure that preceded the last abort; None if all is well.
        ``.peer`` is the rank the failure started from: the peer uccl names, or, where that peer
        failed itself because of a third rank (a cascade), the rank that published no failure
        record (see _origin; this may wait up to 2 s for the other ranks' records)."""
        with self._lock:
            backend, err, store = self._backend, self._error, self._group_store
        if backend is not None and err is None:
            status = backend._last_error()
            if status is not None:
                err = _typed(status, f"uccl group {self._prefix!r} (rank {self._rank} of {self._size})")
                err = _origin(err, store, self._size, self._rank)
                with self._lock:  # found once: the answer stays (and survives abort)
                    if self._backend is backend and self._error is None:
                        self._error = err
        return err

    # -- what torch callers read ----------------------------------------------------------------
    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def getBackendName(self) -> str:
        return BACKEND_NAME

    @property
    def process_group(self) -> Optional[dist.ProcessGroup]:
        """The current torch ProcessGroup (None when not configured): give it to DDP."""
        return self._pg

    @property
    def prefix(self) -> Optional[str]:
        return self._prefix

    def __repr__(self) -> str:
        state = "not configured" if self._pg is None else f"prefix={self._prefix!r}, rank={self._rank}, size={self._size}"
        return f"ReconfigurableProcessGroup({state})"

    # -- internals --------------------------------------------------------------------------------
    def _current(self, op: str) -> dist.ProcessGroup:
        pg = self._pg
        if pg is None:
            raise dist.DistBackendError(f"uccl {op}: the ReconfigurableProcessGroup is not configured (call configure())")
        return pg

    def _store_for(self, store: Union[str, dist.Store], timeout: Timeout) -> dist.Store:
        if isinstance(store, dist.Store):
            return store
        if not isinstance(store, str):
            raise _invalid(f"store must be a torch Store or 'host:port', got {type(store).__name__}")
        addr, _, base_prefix = store.partition("/")
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit():
            raise _invalid(f"store address {store!r} is not 'host:port[/prefix]'")
        with self._lock:
            client = self._stores.get(addr)
        if client is None:
            t = timeout if timeout is not None else self._timeout
            client = dist.TCPStore(host, int(port), is_master=False, wait_for_workers=False,
                                   timeout=datetime.timedelta(seconds=max(_seconds(t), 1.0)))
            with self._lock:
                self._stores[addr] = client
        return dist.PrefixStore(base_prefix, client) if base_prefix else client

    def _release(self, abort: bool) -> None:
        with self._lock:
            backend, self._backend, self._pg = self._backend, None, None
        if backend is None:
            return
        status = backend._last_error()
        if abort:
            backend.abort()  # pending works fail now, nothing waits on a peer
        backend.shutdown()
        if status is not None:
            with self._lock:  # errored() keeps telling why, after the group is gone
                if self._error is None:
                    self._error = _typed(status, f"uccl group {self._prefix!r} (rank {self._rank} of {self._size})")


for _name in ("allreduce", "allreduce_coalesced", "broadcast", "allgather", "_allgather_base", "allgather_coalesced",
              "allgather_into_tensor_coalesced", "reduce", "gather", "scatter", "reduce_scatter",
              "_reduce_scatter_base", "reduce_scatter_tensor_coalesced", "alltoall", "alltoall_base", "barrier",
              "send", "recv", "recv_anysource"):
    setattr(ReconfigurableProcessGroup, _name, _forward(_name))
del _name

_torch_monitored_barrier = dist.monitored_barrier  # torch's own, even if someone replaces it later


def monitored_barrier(group: Optional[dist.ProcessGroup] = None, timeout: Timeout = None,
                      wait_all_ranks: bool = False) -> None:
    """torch.distributed.monitored_barrier for a uccl group (torch's own refuses every backend
    but Gloo before asking it): rank 0 waits up to ``timeout`` for every other rank and raises
    DistBackendError naming the ranks that did not arrive ("Rank 2 failed to pass
    monitoredBarrier in 1000 ms"; all of them with ``wait_all_ranks``); the others raise when
    rank 0 does not answer within twice the timeout. ``timeout``: a timedelta or seconds; None,
    the group's timeout. A Gloo group goes to torch's own."""
    if dist.distributed_c10d._rank_not_in_group(group):  # as torch's: a no-op outside the group
        return
    if timeout is not None and not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=float(timeout))
    pg = group if group is not None else dist.group.WORLD
    if dist.get_backend(pg) == dist.Backend.GLOO:
        _torch_monitored_barrier(group=group, timeout=timeout, wait_all_ranks=wait_all_ranks)
        return
    pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


__all__ = ["ReconfigurableProcessGroup", "create_backend", "create_process_group", "ProcessGroupOptions",
           "monitored_barrier"]
