"""JAX arrays (CPU) and a DLPack device-array stand-in through the Python API: every collective
takes them and hands back the caller's array type (uccl/_interop.py)."""
import numpy as np
import pytest

from harness import run_world

jax = pytest.importorskip("jax")


def body_jax_collectives(ctx):
    import jax.numpy as jnp
    comm, me, n, c = ctx.comm, ctx.rank, ctx.world, ctx.check
    d = [np.arange(8, dtype=np.float32) + r for r in range(n)]
    x = jnp.asarray(d[me])

    def is_jax(v, what):
        if not isinstance(v, jax.Array):
            c.fail(f"{what}: returned {type(v).__name__}, not a jax.Array")

    r = comm.all_reduce(x)
    is_jax(r, "all_reduce")
    c.equal(np.asarray(r), sum(d), "all_reduce")
    c.equal(np.asarray(x), d[me], "all_reduce leaves the (immutable) input as it was")
    r = comm.all_reduce(x, op="max")
    c.equal(np.asarray(r), np.max(d, axis=0), "all_reduce max")
    r = comm.all_gather(x)
    is_jax(r, "all_gather")
    c.equal(np.asarray(r), np.concatenate(d), "all_gather")
    r = comm.reduce_scatter(jnp.asarray(np.concatenate(d)))
    is_jax(r, "reduce_scatter")
    c.equal(np.asarray(r), (n * np.concatenate(d)).reshape(n, -1)[me], "reduce_scatter")
    r = comm.broadcast(x, root=1)
    is_jax(r, "broadcast")
    c.equal(np.asarray(r), d[1], "broadcast")
    r = comm.reduce(x, root=0)
    if me == 0:
        is_jax(r, "reduce")
        c.equal(np.asarray(r), sum(d), "reduce at root")
    r = comm.all_to_all(jnp.asarray(np.repeat(np.arange(n, dtype=np.int32) + 10 * me, 2)))
    is_jax(r, "all_to_all")
    c.equal(np.asarray(r), np.repeat(np.arange(n, dtype=np.int32) * 10 + me, 2), "all_to_all")
    r = comm.all_reduce(jnp.ones(5, dtype=jnp.bfloat16))
    is_jax(r, "all_reduce bfloat16")
    c.equal(np.asarray(r, dtype=np.float32), np.full(5, n, np.float32), "all_reduce bfloat16")
    r = comm.all_reduce(x, async_op=True).wait(30)
    is_jax(r, "async all_reduce")
    c.equal(np.asarray(r), sum(d), "async all_reduce")
    if me == 0:
        comm.send(jnp.arange(3, dtype=jnp.int64), 1)
    elif me == 1:
        r = comm.recv(jnp.zeros(3, dtype=jnp.int64), 0)
        is_jax(r, "recv")
        c.equal(np.asarray(r), np.arange(3), "recv")
    gathered = comm.gather(x, root=0)
    if me == 0:
        is_jax(gathered, "gather")
        c.equal(np.asarray(gathered), np.concatenate(d), "gather")
    return c.count


def test_jax_arrays_through_every_collective():
    counts = run_world(3, "test_jax:body_jax_collectives", env={"JAX_ENABLE_X64": "1", "JAX_PLATFORMS": "cpu"},
                       transport="auto", timeout=240)
    assert counts == [11, 10, 9], counts  # checks made per rank (root-only and p2p ones differ)


class DeviceArray:
    """Stand-in for a CuPy array (not CuPy: there is no GPU here): device memory as DLPack
    reports it (kDLCUDA), copied to the host only through __dlpack__(dl_device=CPU, copy=True),
    mutable, with an array-API namespace. Behind the same interface uccl uses for CuPy."""

    def __init__(self, data):
        self._data = np.array(data)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is None or tuple(dl_device) != (1, 0) or not copy:
            raise BufferError("device memory: ask for a copy to the CPU")
        return self._data.copy().__dlpack__(max_version=max_version)

    def __array_namespace__(self):
        return _DeviceNamespace

    def __setitem__(self, key, value):
        self._data[key] = value._data

    @property
    def device(self):
        return "stand-in:0"

    def host(self):
        return self._data.copy()


class _DeviceNamespace:
    @staticmethod
    def asarray(a, device=None):
        return DeviceArray(a)


def body_device_stand_in(ctx):
    comm, me, c = ctx.comm, ctx.rank, ctx.check
    x = DeviceArray(np.arange(4, dtype=np.float64) + me)
    r = comm.all_reduce(x)
    if r is not x:
        c.fail("all_reduce of a mutable device array returns that array, written in place")
    c.equal(x.host(), np.arange(4.0) * 2 + 1, "all_reduce in place (staged through the host)")
    g = comm.all_gather(DeviceArray(np.full(2, me, np.int32)))
    if not isinstance(g, DeviceArray):
        c.fail(f"all_gather returned {type(g).__name__}")
    c.equal(g.host(), np.array([0, 0, 1, 1], np.int32), "all_gather")
    return c.count


def test_device_arrays_are_staged_and_written_back():
    run_world(2, "test_jax:body_device_stand_in", transport="auto", timeout=120)
