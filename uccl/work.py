"""Work: the handle of an asynchronous operation (keeps its buffers alive until done)."""


class Work:
    __slots__ = ("_work", "_keep", "_result")

    def __init__(self, work, keep, result):
        self._work = work
        self._keep = keep      # the buffers the C++ core reads/writes until completion
        self._result = result  # what the blocking call would have returned

    def wait(self, timeout=None, stream=None):
        """Blocks (GIL released) until done; returns the result or raises a uccl error.

        With ``stream=`` (an operation on device arrays; a stream of their device, as the
        operations' own ``stream=`` takes): returns at once, and work queued on that stream from
        now on runs only after the operation finished (NCCL's ``work.wait()``). Errors then come
        from a later ``wait()`` / ``is_completed()``; the stream is released on failure too. Where a
        stream must not wait on uccl's thread (CUDA, unless ``UCCL_STREAM_WAIT=signal`` or ``kernel``;
        ``uccl.stream_wait_mode()`` says; and under ``auto`` every communicator but the process's
        first, ``describe()`` says), the host waits for the operation instead and its error is
        raised here.
        """
        if stream is not None:
            from .comm import _stream_handle
            self._work.wait_stream(_stream_handle(stream))
            keep = self._keep  # the buffers stay alive until the operation is done, Work or not
            self._work.on_complete(lambda _err: keep)
            return self._result
        self._work.wait(-1.0 if timeout is None else float(timeout))
        self._keep = None
        return self._result

    def is_completed(self):
        return self._work.is_completed()

    def result(self):
        return self._result

    @property
    def seq(self):
        return self._work.seq

    def stats(self):
        """Bytes sent/received per transport and the algorithm used."""
        return self._work.stats()

    def on_complete(self, fn):
        """fn(None) on success or fn(error_message); may run on the progress thread."""
        self._work.on_complete(fn)
