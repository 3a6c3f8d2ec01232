"""uccl: a unified collective communication library.

    import uccl
    comm = uccl.init()                 # from torchrun / mpirun / srun environment
    comm.all_reduce(x)                 # numpy, buffer protocol, DLPack, torch CPU tensors

Also a torch.distributed backend: init_process_group(backend="uccl").
"""
from . import _core
from .comm import Communicator, Estimate
from .errors import (AbortedError, AuthenticationError, InvalidArgument, MismatchError, NotSupported, RemoteError, TimeoutError,
                     UcclError)
from .launch import init
from .store import PrefixStore, TcpStore
from .work import Work

__version__ = _core.build_info()["version"]


def build_info():
    """What this build contains: {'version', 'verbs', 'cuda', 'torch', 'verbs_available', ...}."""
    return dict(_core.build_info())


def stream_wait_mode(backend="cuda"):
    """How ``Work.wait(stream=)`` and the torch backend's ``work.wait()`` hold back a stream of a
    device backend ("cuda", "sim"): "signal" or "kernel" (the stream waits on a flag uccl raises, by
    the device runtime's wait or by a polling kernel; the host returns at once) or "host (why)" (the
    host waits for the operation; CUDA unless UCCL_STREAM_WAIT=signal|kernel), per UCCL_STREAM_WAIT;
    "" when that backend is unavailable here."""
    for b in _core.device_backends():
        if b["name"] == backend:
            return b["stream_wait"]
    raise InvalidArgument(f"no device backend named {backend!r}")


def config():
    """Every UCCL_* variable with its value, default and meaning."""
    return list(_core.config_table())


def _register_torch_backend():
    # Only when the torch extension was built; never imports torch just for `import uccl`
    # unless the backend module exists.
    if not build_info().get("torch"):
        return
    try:
        from . import _torch_backend
    except ImportError:
        return
    _torch_backend.register()
    global ProcessGroupOptions
    ProcessGroupOptions = _torch_backend.ProcessGroupOptions


_register_torch_backend()

__all__ = ["Communicator", "Estimate", "Work", "TcpStore", "PrefixStore", "init", "build_info", "stream_wait_mode", "config", "UcclError", "InvalidArgument",
           "NotSupported", "TimeoutError", "RemoteError", "MismatchError", "AbortedError",
           "AuthenticationError"]
