"""uccl's exception hierarchy (mirrors the C++ status codes in include/uccl/status.h).

Every error carries ``code`` (the C++ code value) and ``peer`` (the rank involved, or None),
and its message names the operation and the peer, e.g.
``rank 3 (host b, 10.0.0.2:41234) closed the connection: all_reduce #1207``.
"""
import builtins


class UcclError(RuntimeError):
    """Base class of every uccl error."""

    def __init__(self, message, code=None, peer=None):
        super().__init__(message)
        self.code = code
        self.peer = peer

    def __reduce__(self):
        # Keeps code and peer across pickling (Ray ships a task's exception to the caller).
        return type(self), (str(self), self.code, self.peer)


class InvalidArgument(UcclError, ValueError):
    """A bad argument: wrong size, dtype, rank, or buffer."""


class NotSupported(UcclError):
    """A normal answer meaning 'not here': callers fall back, tests skip."""


class TimeoutError(UcclError, builtins.TimeoutError):  # noqa: A001 - mirrors the C++ name on purpose
    """A wait passed its deadline (UCCL_TIMEOUT_S or the timeout given)."""


class RemoteError(UcclError):
    """A peer died, closed its connection, or sent something invalid."""


class MismatchError(UcclError):
    """Ranks called different collectives / counts / dtypes / ops / roots in the same slot."""


class AbortedError(UcclError):
    """The communicator was aborted."""


class AuthenticationError(UcclError, PermissionError):
    """The job key was refused: a store or peer has another key (or none), or we have none
    and the store requires one (UCCL_JOB_KEY / UCCL_JOB_KEY_FILE)."""
