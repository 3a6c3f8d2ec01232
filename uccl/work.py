"""Work: the handle of an asynchronous operation (keeps its buffers alive until done)."""


class Work:
    __slots__ = ("_work", "_keep", "_result")

    def __init__(self, work, keep, result):
        self._work = work
        self._keep = keep      # the buffers the C++ core reads/writes until completion
        self._result = result  # what the blocking call would have returned

    def wait(self, timeout=None):
        """Blocks (GIL released) until done; returns the result or raises a uccl error."""
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
