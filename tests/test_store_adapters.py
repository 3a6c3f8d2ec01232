"""Python and torch stores behind uccl's Store: a timeout stays a timeout, a broken store is the
store failing, decided by the exception's type (or, for torch's untyped DistStoreError, by the
clock), never by its text (uccl/store.py, python/core/py_store.cc).

Why it matters: a short lookup that times out is retried (core/connection_dial.cc), a store that
fails fails the communicator; text matching once turned a broken store whose message said
"timed out" into endless retries, and a timeout worded otherwise into a failure."""
import time

import pytest

import uccl
from uccl.store import as_core_store


class DictStore:
    """A plain Python store: the documented contract (TimeoutError when a key is late)."""

    def __init__(self):
        self.kv = {}

    def set(self, key, value):
        self.kv[key] = value

    def get(self, key, timeout):
        self.wait([key], timeout)
        return self.kv[key]

    def wait(self, keys, timeout):
        end = time.monotonic() + timeout
        while any(k not in self.kv for k in keys):
            if time.monotonic() > end:
                raise TimeoutError(f"{keys} not set")
            time.sleep(0.005)

    def add(self, key, delta):
        self.kv[key] = str(int(self.kv.get(key, b"0")) + delta).encode()
        return int(self.kv[key])


class BrokenStore(DictStore):
    """Fails at once with a message that mentions a timeout: still a failure, not a timeout."""

    def wait(self, keys, timeout):
        raise RuntimeError("connection reset while the request timed out")


def test_a_python_store_timeout_is_a_timeout_error():
    core = as_core_store(DictStore())
    core.set("a", b"1")
    assert core.get("a", 1.0) == b"1"
    t0 = time.monotonic()
    with pytest.raises(uccl.TimeoutError):
        core.get("missing", 0.2)
    assert time.monotonic() - t0 < 5


def test_a_failing_python_store_is_a_remote_error_whatever_its_text():
    core = as_core_store(BrokenStore())
    with pytest.raises(uccl.RemoteError) as e:
        core.get("k", 5.0)
    assert not isinstance(e.value, uccl.TimeoutError)
    assert "connection reset" in str(e.value)


torch_dist = pytest.importorskip("torch.distributed")


def test_a_torch_store_timeout_is_a_timeout_error():
    """torch raises DistStoreError for a late key; the adapter names it a timeout by the clock."""
    core = as_core_store(torch_dist.HashStore())
    core.set("a", b"1")
    assert core.get("a", 1.0) == b"1"
    t0 = time.monotonic()
    with pytest.raises(uccl.TimeoutError):
        core.wait(["late"], 0.3)
    assert 0.25 < time.monotonic() - t0 < 5


def test_a_torch_store_that_fails_before_its_deadline_is_a_remote_error():
    """A TCPStore client whose server is gone fails at once with the same DistStoreError type a
    timeout has: that is the store failing (a RemoteError), not a timeout to retry."""
    import datetime
    import subprocess
    import sys

    server = subprocess.Popen(
        [sys.executable, "-c", "import sys, torch.distributed as d; s = d.TCPStore('127.0.0.1', 0, is_master=True, "
         "wait_for_workers=False); print(s.port, flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        client = torch_dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))
        core = as_core_store(client)
        core.set("a", b"1")
        assert core.get("a", 5.0) == b"1"
    finally:
        server.kill()
        server.wait()
    t0 = time.monotonic()
    with pytest.raises(uccl.RemoteError) as e:
        core.wait(["late"], 20.0)
    assert not isinstance(e.value, uccl.TimeoutError), e.value
    assert time.monotonic() - t0 < 15
