"""uccl.sim: arrays on the simulated device (cpp/base/sim_device.h), for tests and benchmarks
of the device path on machines without an accelerator.

The simulated device's memory is mapped PROT_NONE for host code: a SimArray can only be filled
and read through its copies (``SimArray.from_numpy``, ``.numpy()``, ``.copy_from``), exactly as
device memory, and the communicator uses it in place (staged through pinned bounce buffers).

    x = uccl.sim.SimArray.from_numpy(np.arange(8, dtype=np.float32))
    comm.all_reduce(x)            # on the device
    x.numpy()                     # back to the host
    s = uccl.sim.Stream()         # a stream: comm.all_reduce(x, stream=s) is ordered after s
    uccl.sim.set_copy_speed(2.0)  # GB/s of copies to/from simulated memory (0: unthrottled)

DLPack: ``__dlpack_device__`` is (kDLExtDev = 12, device); ``__dlpack__`` only exports a host
copy (``dl_device=(1, 0), copy=True``, what ``np.from_dlpack(x, device="cpu", copy=True)``
asks), since no other library can reach simulated memory.
"""
import contextlib

import numpy as np

from . import _core
from .errors import InvalidArgument

KDL_EXT_DEV = 12  # DLPack's device type for "another device"


def devices():
    """Number of simulated devices (UCCL_SIM_DEVICES)."""
    return _core.sim_devices()


def set_copy_speed(gbps, latency_us=0.0):
    """Bandwidth (GB/s, 0 = unthrottled) and latency of copies to/from simulated memory."""
    _core.sim_set_copy_speed(float(gbps), float(latency_us))


def copy_speed():
    return _core.sim_copy_speed()


def allocated_bytes():
    """Simulated device memory allocated now (tests check nothing leaks)."""
    return _core.sim_allocated_bytes()


class Stream:
    """An in-order queue of simulated device work (its own worker thread)."""

    def __init__(self, device=0):
        self._s = _core.sim_stream(int(device))

    @property
    def handle(self):
        return self._s.handle

    @property
    def device(self):
        return self._s.device

    def synchronize(self):
        self._s.synchronize()

    @contextlib.contextmanager
    def capture(self):
        """Stands in for a CUDA graph capture on this stream (tests): while it lasts, uccl refuses
        to order an operation on the stream or to make it wait (uccl.NotSupported)."""
        self._s.set_capturing(True)
        try:
            yield self
        finally:
            self._s.set_capturing(False)


def _handle(stream):
    return 0 if stream is None else (stream if isinstance(stream, int) else stream.handle)


class SimArray:
    """A 1-D (or shaped) contiguous array in simulated device memory."""

    def __init__(self, shape, dtype="float32", device=0, _base=None, _offset=0):
        self.shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.device = int(device)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        self._base = _base  # a view keeps its allocation alive
        self.ptr = 0
        if _base is not None:
            self.ptr = _base.ptr + _offset
        else:
            self.ptr = _core.sim_alloc(max(self.nbytes, 1), self.device)

    def __del__(self):
        if getattr(self, "ptr", 0) and getattr(self, "_base", None) is None:
            _core.sim_free(self.ptr)
        self.ptr = 0

    def __getitem__(self, key):
        """x[a:b] of a 1-D array: a view of the same device memory (in-place collectives)."""
        if not isinstance(key, slice) or len(self.shape) != 1:
            raise InvalidArgument("SimArray supports 1-D slices x[a:b] only")
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise InvalidArgument("SimArray slices must be contiguous (step 1)")
        stop = max(stop, start)
        base = self._base if self._base is not None else self
        return SimArray(stop - start, self.dtype, self.device, _base=base,
                        _offset=self.ptr - base.ptr + start * self.dtype.itemsize)

    def __len__(self):
        return self.shape[0] if self.shape else 1

    def __repr__(self):
        return f"SimArray(shape={self.shape}, dtype={self.dtype}, device={self.device})"

    @classmethod
    def from_numpy(cls, arr, device=0, stream=None, sync=True):
        arr = np.ascontiguousarray(arr)
        x = cls(arr.shape, arr.dtype, device)
        x.copy_from(arr, stream=stream, sync=sync)
        return x

    def copy_from(self, arr, stream=None, sync=True):
        """Host -> device copy queued on `stream` (default stream when None); with sync=False
        the caller keeps `arr` alive and unchanged until the stream has run it."""
        arr = np.ascontiguousarray(arr, dtype=self.dtype)
        if arr.size != self.size:
            raise InvalidArgument(f"copy_from: {arr.size} elements into a SimArray of {self.size}")
        _core.sim_copy(self.ptr, arr.ctypes.data, self.nbytes, "h2d", self.device, _handle(stream), bool(sync))
        return self

    def numpy(self, stream=None):
        """Device -> host copy (waits for it)."""
        out = np.empty(self.shape, dtype=self.dtype)
        _core.sim_copy(out.ctypes.data, self.ptr, self.nbytes, "d2h", self.device, _handle(stream), True)
        return out

    def __dlpack_device__(self):
        return (KDL_EXT_DEV, self.device)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is not None and tuple(dl_device)[0] == 1 and copy is not False:
            host = self.numpy()
            return host.__dlpack__(max_version=max_version) if max_version else host.__dlpack__()
        raise BufferError("simulated device memory is reachable only through uccl.sim copies; "
                          "ask for a host copy (dl_device=(1, 0), copy=True)")
