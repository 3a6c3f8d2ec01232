"""Arrays of other frameworks (JAX, CuPy, anything with DLPack and the array API standard's
``__array_namespace__``) through the Communicator, with results handed back as the caller's
array type.

How: the array is seen as numpy through DLPack (``np.from_dlpack``: zero-copy for host memory;
a DLPack copy to the host for device memory uccl has no backend for), the collective runs on
that, and the result goes back through the caller's own namespace
(``x.__array_namespace__().asarray(result, device=x.device)``). Arrays uccl may not write
(JAX arrays are immutable; a device array's host copy) are worked on in a host copy: the
returned value is the result, and a mutable caller array (CuPy) also gets it written back for
the in-place collectives, so ``comm.all_reduce(x)`` means the same as for numpy. A numpy array or
a torch CPU tensor never comes here (one type check on the fast path), and neither does a CUDA
array with ``__cuda_array_interface__`` (CuPy) or a torch CUDA tensor while uccl's cuda backend is
available: uccl uses it in place on its device (uccl/_buffers.py), ordered on ``stream=``, and
allocates outputs of the same library on the same device. Other device arrays (JAX's on a GPU:
read-only) are staged through the host; torch tensors of other devices (xpu, mps, PrivateUse1)
by torch's own copies, their host image a torch CPU tensor, written back by ``Tensor.copy_``.
"""
import contextlib
import functools

import numpy as np

from ._buffers import backend_available
from .errors import NotSupported
from .work import Work

_KDL_CPU, _KDL_CUDA_HOST = 1, 3
# Collectives that write into their first argument when no `out` is given.
_IN_PLACE = {"all_reduce", "reduce", "broadcast", "recv"}


def _is_torch(obj):
    return type(obj).__module__.startswith("torch")


def is_foreign(obj):
    if obj is None or isinstance(obj, np.ndarray):
        return False
    if _is_torch(obj):
        return staged_torch(obj)
    if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__array_namespace__")):
        return False
    # Writable CUDA arrays the cuda backend can use where they are (CuPy) take the device path;
    # read-only ones (JAX's) are worked on in a host copy like other immutable arrays.
    return not (writable_cuda_array(obj) and backend_available("cuda"))


def staged_torch(t):
    """A torch tensor on a device uccl has no backend for (xpu, mps, a PrivateUse1 device; CUDA
    where uccl's cuda backend is unavailable): staged through torch's own copies (the device's
    copy functions on its current stream), like other vendors' arrays. CPU tensors and CUDA
    tensors uccl can use in place never are; meta tensors have no data to stage."""
    kind = getattr(getattr(t, "device", None), "type", None)
    if kind is None or kind in ("cpu", "meta") or not hasattr(t, "data_ptr"):
        return False
    return not (kind == "cuda" and backend_available("cuda"))


def writable_cuda_array(obj):
    cai = getattr(obj, "__cuda_array_interface__", None)
    return cai is not None and not cai.get("data", (0, True))[1]


def _to_host(obj, what):
    """(numpy view or copy of obj, whether it is a copy); a torch CPU tensor for a torch tensor."""
    if _is_torch(obj):
        try:
            return obj.detach().to("cpu").contiguous(), True  # the device's own copy
        except RuntimeError as e:
            raise NotSupported(f"{what}: a {obj.device} tensor cannot be copied to the host ({e})") from e
    device = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else _KDL_CPU
    if device in (_KDL_CPU, _KDL_CUDA_HOST):
        try:
            return np.from_dlpack(obj), False
        except (BufferError, RuntimeError, TypeError):
            # numpy's DLPack has no bfloat16: the framework's own host conversion (ml_dtypes).
            return np.asarray(obj), True
    try:
        return np.from_dlpack(obj, device="cpu", copy=True), True
    except (BufferError, RuntimeError, TypeError, ValueError) as e:
        if callable(getattr(obj, "get", None)):  # CuPy's device-to-host copy, for older DLPack
            return np.asarray(obj.get()), True
        raise NotSupported(f"{what}: {type(obj).__name__} on DLPack device {device} cannot be copied "
                           f"to the host ({e})") from e


class _Foreign:
    """One caller array, its host image, and the way back."""

    def __init__(self, obj, what, writable):
        self.obj = obj
        self.host, copied = _to_host(obj, what)
        on_numpy = isinstance(self.host, np.ndarray)  # else a torch CPU tensor: torch's host copy
        self.staged = copied or not self.host.flags.writeable
        if writable and on_numpy and not self.host.flags.writeable:
            self.host = self.host.copy()

    def give_back(self, result, written):
        """The caller-typed value for `result`; writes it into the caller's array when the
        collective wrote into a staged copy and the array is mutable."""
        if result is self.host and not self.staged:
            return self.obj
        if written and result is self.host and _is_torch(self.obj):
            import torch

            with torch.no_grad():  # the device's copy back, below autograd (a leaf may require grad)
                self.obj.copy_(result)
            return self.obj
        value = as_caller_type(self.obj, result)
        if written and result is self.host:
            try:
                self.obj[...] = value
                return self.obj
            except (TypeError, ValueError, AttributeError):
                pass  # immutable (JAX): the returned value is the result
        return value


def as_caller_type(like, result):
    """result (numpy) as an array of like's framework, on like's device."""
    if _is_torch(like):
        import torch

        return torch.as_tensor(result).to(like.device)
    xp = like.__array_namespace__()
    try:
        return xp.asarray(result, device=like.device)
    except (TypeError, AttributeError):
        return xp.asarray(result)


class _ConvertedWork(Work):
    __slots__ = ("_convert",)

    def __init__(self, work, convert):
        super().__init__(work._work, work._keep, work._result)
        self._convert = convert

    def wait(self, timeout=None):
        return self._convert(super().wait(timeout))

    def result(self):
        return self._convert(self._result)


def accepts_arrays(method):
    """Lets a Communicator method take foreign arrays as `x` and `out` (see module doc)."""
    name = method.__name__.lstrip("_")  # _all_reduce: all_reduce's general path
    in_place = name in _IN_PLACE

    @functools.wraps(method)
    def call(self, x, *args, **kwargs):
        if type(x) is np.ndarray:
            return method(self, x, *args, **kwargs)
        x_foreign, out_foreign = is_foreign(x), is_foreign(kwargs.get("out"))
        if not (x_foreign or out_foreign):
            return method(self, x, *args, **kwargs)
        writes_x = in_place and kwargs.get("out") is None
        # A torch stream given for staged torch tensors is where torch's copies in and out run
        # (so the op is ordered after the work queued there); the host op itself needs none.
        staging = contextlib.nullcontext()
        if _is_torch(kwargs.get("stream")) and ((x_foreign and _is_torch(x)) or (out_foreign and _is_torch(kwargs["out"]))):
            staging, kwargs["stream"] = kwargs["stream"], None
        with staging:
            fx = _Foreign(x, f"{name} input", writes_x) if x_foreign else None
            fo = _Foreign(kwargs["out"], f"{name} output", True) if out_foreign else None
        if fo:
            kwargs["out"] = fo.host
        result = method(self, fx.host if fx else x, *args, **kwargs)

        def convert(r):
            if r is None:
                return None
            with staging:
                if fo and r is fo.host:
                    return fo.give_back(r, True)
                if fx:
                    return fx.give_back(r, writes_x)
            return r

        return _ConvertedWork(result, convert) if isinstance(result, Work) else convert(result)

    return call
