"""Arrays uccl meets on devices: the simulated device's SimArray (DLPack, memory location),
arrays of a device without a uccl backend staged through their own library's copy, CUDA arrays
used in place when the cuda backend is there, and CUDA memory the backend does not recognize
refused instead of read."""
import numpy as np
import pytest

import uccl
from harness import run_world


# ---- arrays of a device without a uccl backend: staged through their library's copy ------------------

class _FakeVendorArray:
    """An array on a device uccl has no backend for (DLPack device type 10, ROCm): reachable only
    through DLPack host copies and its own namespace, like a vendor library's arrays."""

    def __init__(self, host):
        self._host = np.array(host)
        self.device = "vendor:0"

    def __dlpack_device__(self):
        return (10, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is None or tuple(dl_device)[0] != 1 or copy is False:
            raise BufferError("device memory: ask for a host copy")
        return self._host.copy().__dlpack__()

    def __array_namespace__(self):
        return _FakeVendorNamespace

    def __setitem__(self, key, value):
        self._host[key] = value._host if isinstance(value, _FakeVendorArray) else value


class _FakeVendorNamespace:
    @staticmethod
    def asarray(x, device=None):
        return _FakeVendorArray(np.asarray(x))


def body_foreign(ctx):
    x = _FakeVendorArray(np.arange(5, dtype=np.float32) * (ctx.rank + 1))
    res = ctx.comm.all_reduce(x)
    g = ctx.comm.all_gather(_FakeVendorArray(np.full(2, ctx.rank, np.int32)))
    return {"same": res is x, "value": x._host.tolist(), "gathered": g._host.tolist(), "type": type(g).__name__}


def test_arrays_of_a_device_without_backend_are_staged_through_their_library():
    results = run_world(2, "test_device_arrays:body_foreign", transport="tcp", timeout=60)
    for r in results:
        assert r["same"] and r["value"] == [0.0, 3.0, 6.0, 9.0, 12.0], r
        assert r["type"] == "_FakeVendorArray" and r["gathered"] == [0, 0, 1, 1], r


class _FakeCudaArray(_FakeVendorArray):
    """A CUDA array as CuPy shows itself: DLPack device 2, __cuda_array_interface__, a namespace
    that allocates on a device."""

    def __init__(self, host, read_only=False):
        super().__init__(host)
        self.device = "cuda:1"
        self.dtype = self._host.dtype
        self.read_only = read_only

    def __dlpack_device__(self):
        return (2, 1)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self._host.shape, "typestr": self._host.dtype.str, "data": (0x7f0000000000, self.read_only),
                "version": 3, "strides": None}

    def __array_namespace__(self):
        return _FakeCudaNamespace


class _FakeCudaNamespace:
    @staticmethod
    def empty(shape, dtype=None, device=None):
        a = _FakeCudaArray(np.empty(shape, dtype))
        a.device = device
        return a


def test_cuda_arrays_are_used_in_place_when_the_cuda_backend_is_there(monkeypatch):
    """CuPy-like arrays (writable, __cuda_array_interface__) take the device path while uccl's cuda
    backend is available (in place, ordered on stream=; issue 14 item 7), and are staged through
    their library's host copy otherwise, as read-only ones (JAX's) always are; outputs uccl allocates are the input's library on its device
    (torch tensors too: a tensor of another device gets an output on that device)."""
    from uccl import _buffers
    from uccl._interop import is_foreign
    from uccl.comm import _alloc_like

    x = _FakeCudaArray(np.arange(4, dtype=np.float32))
    monkeypatch.setitem(_buffers._BACKENDS, "cuda", True)
    assert not is_foreign(x)
    assert is_foreign(_FakeCudaArray([1.0], read_only=True))  # JAX's are read-only: worked on in a host copy
    out = _alloc_like(x, 12)
    assert type(out) is _FakeCudaArray and out.device == "cuda:1" and out.dtype == np.float32 and out._host.shape == (12,)
    monkeypatch.setitem(_buffers._BACKENDS, "cuda", False)
    assert is_foreign(x)
    assert is_foreign(_FakeVendorArray([1.0]))  # no CUDA interface: staged whatever the backends
    torch = pytest.importorskip("torch")
    t = _alloc_like(torch.empty(3, dtype=torch.bfloat16, device="meta"), 7)
    assert t.device.type == "meta" and t.dtype == torch.bfloat16 and t.shape == (7,)


def test_cuda_memory_the_backend_does_not_recognize_is_refused_not_read():
    """A CUDA array whose memory uccl's cuda backend does not see as device memory (managed
    memory, another process's pointer) would be read by host code as if it were host memory:
    refused with NotSupported instead (the check every CUDA array and torch CUDA tensor passes)."""
    from uccl._buffers import check_cuda_memory
    x = np.ones(16, np.float32)
    with pytest.raises(uccl.NotSupported, match="does not recognize as device memory .it says: host"):
        check_cuda_memory(x.ctypes.data, x.nbytes, "x")
    check_cuda_memory(0, 0, "an empty array")  # nothing to read: nothing to check



def test_sim_array_basics():
    from uccl.sim import SimArray
    before = uccl.sim.allocated_bytes()
    a = SimArray.from_numpy(np.arange(10, dtype=np.int32))
    assert np.array_equal(a.numpy(), np.arange(10, dtype=np.int32))
    v = a[2:5]
    assert np.array_equal(v.numpy(), [2, 3, 4])
    assert a.__dlpack_device__() == (uccl.sim.KDL_EXT_DEV, 0)
    assert np.array_equal(np.from_dlpack(a, device="cpu", copy=True), np.arange(10))
    with pytest.raises(BufferError):
        a.__dlpack__()
    assert uccl._core.memory_location(a.ptr) == ("sim", 0)
    del a, v
    assert uccl.sim.allocated_bytes() == before
    names = [b["name"] for b in uccl.build_info()["device_backends"]]
    assert "sim" in names
