"""The sweeps of tests/sweeps.py on simulated-device buffers (run inside each rank).

DeviceComm wraps a uccl.Communicator: every numpy buffer a sweep passes is copied to a
uccl.sim.SimArray (an `x` that is a view of `out`, or the reverse, becomes the same view of the
device copy, so the in-place forms stay in place on the device), the collective runs on the
device arrays, and every buffer is copied back afterwards. The sweeps' checks (results against
numpy, "input was not modified", "returned the buffer it was given") therefore test the device
path unchanged. A rank's mode says what it passes: "host" (plain numpy), "simN" (sim device N),
"simN-slow" (device N, with throttled copies: a second "vendor" with another copy speed).
"""
import numpy as np

import uccl
from uccl.sim import SimArray

import sweeps


def _offset(view, whole):
    """Element offset of numpy `view` inside `whole`, or None when they do not overlap."""
    if view is None or whole is None or not np.shares_memory(view, whole):
        return None
    return (view.ctypes.data - whole.ctypes.data) // whole.dtype.itemsize


class _DeviceWork:
    def __init__(self, work, back):
        self._w, self._back = work, back

    def wait(self, timeout=None):
        self._w.wait(timeout)
        self._back()
        return None

    def is_completed(self):
        return self._w.is_completed()

    def stats(self):
        return self._w.stats()


class DeviceComm:
    def __init__(self, comm, device=0):
        self._c, self._device = comm, device

    def __getattr__(self, name):
        return getattr(self._c, name)

    def _dev(self, a):
        return None if a is None else SimArray.from_numpy(np.ascontiguousarray(a), self._device)

    @staticmethod
    def _back(d, a):
        if d is not None and a is not None and a.size:
            a[...] = d.numpy().reshape(a.shape)

    def _call(self, name, x, *args, **kw):
        out = kw.get("out")
        dx = dout = None
        if out is not None and x is not None and _offset(x, out) is not None and x.size <= out.size:
            dout = self._dev(out)
            o = _offset(x, out)
            dx = dout[o:o + x.size]
        elif out is not None and x is not None and _offset(out, x) is not None:
            dx = self._dev(x)
            o = _offset(out, x)
            dout = dx[o:o + out.size]
        else:
            dx, dout = self._dev(x), self._dev(out)
        if out is not None:
            kw["out"] = dout
        res = getattr(self._c, name)(dx, *args, **kw)
        if dout is not None:
            self._back(dout, out)
        if x is not None and not (out is not None and _offset(x, out) is not None):
            self._back(dx, x)
        if res is None:
            return None
        if res is dx:
            return x
        if res is dout:
            return out
        return res.numpy() if isinstance(res, SimArray) else res

    def __getattribute__(self, name):
        if name in ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_v", "reduce_scatter",
                    "reduce_scatter_v", "all_to_all", "all_to_all_v", "gather", "scatter", "send", "recv"):
            return lambda x, *a, **k: self._call(name, x, *a, **k)
        return object.__getattribute__(self, name)

    def batch_isend_irecv(self, ops):
        # A buffer given twice (in-place sendrecv) gets one device copy: it stays in place there.
        dev_ops, pairs, copies = [], [], {}
        for item in ops:
            key = (item[1].ctypes.data, item[1].nbytes)
            d = copies.get(key)
            if d is None:
                d = copies[key] = self._dev(item[1])
            dev_ops.append((item[0], d) + tuple(item[2:]))
            if item[0] == "recv":
                pairs.append((d, item[1]))
        w = self._c.batch_isend_irecv(dev_ops)

        def back():
            for d, a in pairs:
                self._back(d, a)
        return _DeviceWork(w, back)


def setup(ctx, modes):
    """Applies this rank's mode; returns it."""
    mode = modes[ctx.rank % len(modes)]
    if mode == "host":
        return mode
    device = int(mode[3])
    if mode.endswith("-slow"):
        uccl.sim.set_copy_speed(3.0, 20.0)  # a slower "vendor": 3 GB/s, 20 us per copy
    ctx.comm = DeviceComm(ctx.comm, device)
    return mode


def scenario(ctx, modes, parts, big):
    """Every sweep of `parts` with this rank's buffers per `modes`; returns the all_reduce hash
    (bitwise equal on every rank, host or device) and the bounce / device memory left."""
    mode = setup(ctx, modes)
    digest = sweeps.all_reduce_sweep(ctx, big=big)
    for name in parts:
        sweeps.PARTS[name](ctx, big=big >= 2)
    return {"mode": mode, "hash": digest, "checks": ctx.check.count, "describe": ctx.comm.describe()}
