"""Rendezvous of a uccl communicator through Ray itself (no MASTER_ADDR to set).

Rank 0 serves uccl's TcpStore on its node's IP and publishes "ip:port" in Ray's internal key-value
store (the GCS, the same place Ray's own "gloo" backend publishes its master address); the other
ranks wait for that key with a deadline, connect, and the communicator bootstraps through the
store as usual. The key is scoped by Ray job and group name and removed by rank 0 once every rank
has checked in, so a later group of the same name starts clean.
"""
import time

import ray
from ray.experimental import internal_kv

import uccl
from uccl.errors import InvalidArgument, TimeoutError

_NAMESPACE = "uccl"


def default_timeout():
    """UCCL_TIMEOUT_S as the core reads it (one config table: cpp/core/config.cc)."""
    for v in uccl.config():
        if v["name"] == "UCCL_TIMEOUT_S":
            return float(v["value"])
    return 600.0


def _key(group_key):
    return f"rendezvous/{ray.get_runtime_context().get_job_id()}/{group_key}"


def connect(group_key, rank, world_size, timeout=None, **options):
    """Every member calls it with the same group_key and world_size; returns a uccl.Communicator.

    Raises uccl.InvalidArgument for a bad rank/size and uccl.TimeoutError when rank 0's address
    does not appear within `timeout` seconds (rank 0 never joined)."""
    if not 0 <= rank < world_size:
        raise InvalidArgument(f"uccl ray group {group_key!r}: rank {rank} is outside [0, {world_size})")
    timeout = default_timeout() if timeout is None else float(timeout)
    key = _key(group_key)
    if rank == 0:
        host = ray.util.get_node_ip_address()
        store = uccl.TcpStore(host, 0, is_server=True, timeout=timeout)
        internal_kv._internal_kv_put(key, f"{host}:{store.port}", overwrite=True, namespace=_NAMESPACE)
    else:
        deadline = time.monotonic() + timeout
        while (value := internal_kv._internal_kv_get(key, namespace=_NAMESPACE)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"uccl ray group {group_key!r}: rank 0 did not publish its store address "
                                   f"within {timeout:g} s (is rank 0 running?)", peer=0)
            time.sleep(0.02)
        host, port = value.decode().rsplit(":", 1)
        store = uccl.TcpStore(host, int(port), timeout=timeout)
    # Creating a communicator does not wait for the peers (connections are made on first use),
    # so each rank checks in and rank 0 withdraws the address once all have read it.
    joined = f"{group_key}/joined/"
    try:
        if rank == 0:
            store.wait([f"{joined}{r}" for r in range(1, world_size)], timeout)
        else:
            store.set(f"{joined}{rank}", b"1")
    finally:
        if rank == 0:
            internal_kv._internal_kv_del(key, namespace=_NAMESPACE)
    comm = uccl.Communicator(rank, world_size, uccl.PrefixStore(store, f"{group_key}/"), timeout=timeout,
                             name=str(group_key), **options)
    comm._store_owner = store  # rank 0's store server lives as long as the communicator
    return comm
