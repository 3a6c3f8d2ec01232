"""Turning user buffers into (address, element count, dtype) for the C++ core.

Accepted: numpy arrays, anything with the buffer protocol (bytes-like, array.array, memoryview),
objects with ``__dlpack__`` (host memory), torch CPU tensors, and device memory of a registered
device backend: uccl.sim.SimArray, CUDA arrays (``__cuda_array_interface__``, torch CUDA tensors)
when the cuda backend is available. The address goes to the core, which finds the backend
(cpp/base/device.h). Buffers must be contiguous; an output buffer must be writable. Device
arrays of a backend that is not here are refused with NotSupported (array-API device arrays that
uccl cannot use in place, such as CuPy's without the cuda backend or JAX's on a GPU, are staged
through their library's host copy before they get here: uccl/_interop.py).
"""
import numpy as np

from ._core import DTYPE_SIZE, DTYPES, RED_OPS as OPS, buffer_address, memory_location  # uccl::DataType / RedOp, from C++
from .errors import InvalidArgument, NotSupported
from .sim import SimArray

_BACKENDS = {}


def _backends():
    """{name: available} of the core's device backends (asked once)."""
    if not _BACKENDS:
        from ._core import device_backends
        _BACKENDS.update({b["name"]: b["available"] for b in device_backends()})
    return _BACKENDS


def backend_available(name):
    """Whether the core has an available device backend of that name ("cuda", "sim")."""
    return _backends().get(name, False)


class Buffer:
    """A resolved buffer: address, element count, uccl dtype code, and the object kept alive."""

    __slots__ = ("addr", "count", "dtype", "owner", "nbytes")

    def __init__(self, addr, count, dtype, owner):
        self.addr, self.count, self.dtype, self.owner = addr, count, dtype, owner
        self.nbytes = count * DTYPE_SIZE[dtype]


_CODE_OF_NUMPY_DTYPE = {}  # np.dtype -> code: dtype.name costs ~1.5 us, a dict lookup 30 ns


def _numpy_dtype_code(dt):
    code = _CODE_OF_NUMPY_DTYPE.get(dt)
    if code is None:
        code = _CODE_OF_NUMPY_DTYPE[dt] = _numpy_dtype_code_slow(dt)
    return code


def _numpy_dtype_code_slow(dt):
    name = dt.name
    if name in DTYPES:
        return DTYPES[name]
    if name == "bfloat16":  # ml_dtypes' bfloat16
        return DTYPES["bfloat16"]
    raise InvalidArgument(f"unsupported dtype {name}; uccl supports {', '.join(DTYPES)}")


def check_cuda_memory(addr, nbytes, what):
    """A CUDA array's memory must be what uccl's cuda backend sees as device memory: handed to
    the core as host memory it would be read by host code (a crash, not an error)."""
    if nbytes == 0 or addr == 0:
        return
    where, _ = memory_location(addr)
    if where != "cuda":
        raise NotSupported(f"{what}: CUDA memory at {addr:#x} that uccl's cuda backend does not recognize as "
                           f"device memory (it says: {where}); managed or host-registered memory is not "
                           "supported, and the array must belong to a device of this process")


def _from_torch(t, writable, what):
    if t.device.type == "cuda" and backend_available("cuda"):
        check_cuda_memory(t.data_ptr(), t.numel() * t.element_size(), what)  # then used in place
    elif t.device.type != "cpu":
        have = ", ".join(n for n, up in _backends().items() if up) or "none"
        raise NotSupported(f"{what}: {t.device.type} tensors need a uccl device backend for {t.device.type} "
                           f"(this build's: {have}); pass CPU memory")
    if not t.is_contiguous():
        raise InvalidArgument(f"{what}: tensor is not contiguous (call .contiguous() first)")
    name = str(t.dtype).replace("torch.", "")
    if name not in DTYPES:
        raise InvalidArgument(f"{what}: unsupported dtype {name}; uccl supports {', '.join(DTYPES)}")
    return Buffer(t.data_ptr(), t.numel(), DTYPES[name], t)


def as_buffer(obj, what="buffer", writable=False, dtype=None):
    """Resolves obj to a Buffer; raises InvalidArgument/NotSupported naming `what`."""
    if type(obj) is np.ndarray and obj.flags.c_contiguous and (obj.flags.writeable or not writable):
        # The common case, kept to ~0.3 us: it is paid twice on every call.
        return Buffer(buffer_address(obj), obj.size, _numpy_dtype_code(obj.dtype), obj)
    if obj is None:
        raise InvalidArgument(f"{what} is None")
    if type(obj) is SimArray:
        if not obj.ptr:
            raise InvalidArgument(f"{what}: SimArray was freed")
        return Buffer(obj.ptr, obj.size, _numpy_dtype_code(obj.dtype), obj)
    if hasattr(obj, "__cuda_array_interface__") and not type(obj).__module__.startswith("torch"):
        cai = obj.__cuda_array_interface__
        if not backend_available("cuda"):
            raise NotSupported(f"{what}: CUDA arrays need uccl's cuda backend, which is not available here; "
                               "pass host memory")
        if cai.get("strides") is not None:
            raise InvalidArgument(f"{what}: CUDA array is not C-contiguous")
        if writable and cai["data"][1]:
            raise InvalidArgument(f"{what}: CUDA array is read-only but uccl must write into it")
        count = int(np.prod(cai["shape"], dtype=np.int64))
        dt = np.dtype(cai["typestr"])
        check_cuda_memory(int(cai["data"][0]), count * dt.itemsize, what)
        return Buffer(int(cai["data"][0]), count, _numpy_dtype_code(dt), obj)
    if type(obj).__module__.startswith("torch"):
        return _from_torch(obj, writable, what)
    if not isinstance(obj, np.ndarray):
        if hasattr(obj, "__dlpack__"):
            try:
                obj = np.from_dlpack(obj)
            except (RuntimeError, BufferError, TypeError) as e:
                raise NotSupported(f"{what}: DLPack object is not in host memory ({e})") from e
        else:
            try:
                view = memoryview(obj)
            except TypeError as e:
                raise InvalidArgument(f"{what}: {type(obj).__name__} is not an array or buffer") from e
            # Keep the element type of typed buffers (array.array('f'), cast memoryviews);
            # plain bytes-like objects are uint8.
            if not view.c_contiguous:
                raise InvalidArgument(f"{what}: buffer is not C-contiguous")
            obj = np.asarray(view) if view.format not in ("B", "b", "c") else np.frombuffer(view, dtype=np.uint8)
            if dtype is not None:
                obj = obj.view(dtype)
    if not obj.flags.c_contiguous:
        raise InvalidArgument(f"{what}: array is not C-contiguous (use numpy.ascontiguousarray)")
    if writable and not obj.flags.writeable:
        raise InvalidArgument(f"{what}: array is read-only but uccl must write into it")
    return Buffer(buffer_address(obj), obj.size, _numpy_dtype_code(obj.dtype), obj)


def op_code(op):
    code = OPS.get(op) if type(op) is str else None
    if code is not None:
        return code
    if isinstance(op, int):
        return op
    key = str(op).lower().replace("reduceop.", "")
    if key not in OPS:
        raise InvalidArgument(f"unknown reduction op {op!r}; expected one of {', '.join(OPS)}")
    return OPS[key]
