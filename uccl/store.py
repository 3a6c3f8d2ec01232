"""Stores for bootstrap: uccl's own TCP store, and adapters for anyone else's.

uccl only needs set/get/wait/add. Any of these can be passed where a store is expected:
  * uccl.TcpStore (uccl's own; rank 0 serves it),
  * a torch.distributed Store (TCPStore, FileStore, PrefixStore...),
  * any object with set(key, bytes), get(key, timeout_s), wait(keys, timeout_s), add(key, n),
    whose get and wait raise TimeoutError (the builtin, or a subclass such as uccl.TimeoutError)
    when the keys did not appear in time; any other exception is the store failing.
uccl tells the two apart by the exception's type, never by its text (a timeout lets a caller
retry a short lookup; a failing store fails the communicator).
"""
import datetime
import time

from . import _core


class TcpStore:
    """uccl's TCP store. is_server=True also serves it from this process (on a thread).

    The serving process may leave as soon as its wait for the others' last key returns (every
    writer is answered before a waiter hears of the key), but it must outlive the waiters of
    keys it sets itself, as with torch's TCPStore."""

    def __init__(self, host, port=0, is_server=False, timeout=300.0):
        self.server = _core.TcpStoreServer.start("::" if host in ("", "*") else _bind_host(host), port) if is_server else None
        self.host = host
        self.port = self.server.port if self.server else port
        self._store = _core.connect_tcp_store(_connect_host(host), self.port, timeout)

    def set(self, key, value):
        self._store.set(key, value if isinstance(value, bytes) else str(value).encode())

    def get(self, key, timeout=300.0):
        return self._store.get(key, timeout)

    def wait(self, keys, timeout=300.0):
        self._store.wait(list(keys), timeout)

    def add(self, key, delta):
        return self._store.add(key, delta)

    def core(self):
        return self._store


def _bind_host(host):
    # Serve on every address of the family, so peers may use any of this host's names.
    return "::" if ":" in host else "0.0.0.0"


def _connect_host(host):
    return "127.0.0.1" if host in ("", "*", "0.0.0.0") else host


class PrefixStore:
    """A view of a store under a key prefix, so one store can bootstrap several communicators."""

    def __init__(self, store, prefix):
        self.store, self.prefix = store, prefix

    def set(self, key, value):
        self.store.set(self.prefix + key, value)

    def get(self, key, timeout):
        return self.store.get(self.prefix + key, timeout)

    def wait(self, keys, timeout):
        self.store.wait([self.prefix + k for k in keys], timeout)

    def add(self, key, delta):
        return self.store.add(self.prefix + key, delta)


class _TorchStoreAdapter:
    """torch.distributed.Store -> the (set, get(timeout), wait(timeout), add) shape.

    torch raises the same DistStoreError for a wait that timed out and for a store that broke
    (a reset connection, a server gone), with only the text to tell them apart. The adapter
    tells them apart by the clock instead: a wait that failed at its deadline timed out
    (raised as TimeoutError), one that failed before it is the store failing (re-raised)."""

    # torch rounds the timeout to milliseconds and measures from its own start.
    _DEADLINE_SLACK_S = 0.02

    def __init__(self, store):
        self.store = store

    def set(self, key, value):
        self.store.set(key, value)

    def get(self, key, timeout):
        self.wait([key], timeout)
        return self.store.get(key)

    def wait(self, keys, timeout):
        start = time.monotonic()
        try:
            self.store.wait(list(keys), datetime.timedelta(seconds=timeout))
        except Exception as e:
            if isinstance(e, TimeoutError) or time.monotonic() - start >= timeout - self._DEADLINE_SLACK_S:
                raise TimeoutError(f"keys {list(keys)} did not appear within {timeout:g} s: {e}") from e
            raise

    def add(self, key, delta):
        return self.store.add(key, delta)


def as_core_store(store):
    """Returns a _core.Store for any accepted store object."""
    if isinstance(store, _core.Store):
        return store
    if isinstance(store, TcpStore):
        return store.core()
    module = type(store).__module__ or ""
    if module.startswith("torch"):
        return _core.wrap_python_store(_TorchStoreAdapter(store))
    for name in ("set", "get", "wait", "add"):
        if not callable(getattr(store, name, None)):
            from .errors import InvalidArgument
            raise InvalidArgument(f"store object {type(store).__name__} has no {name}() method")
    return _core.wrap_python_store(store)
