"""The harness itself: failures inside ranks reach the test, and nothing can hang it."""
import os
import shutil
import time

import pytest

from harness import run_world


def body_hang(ctx):
    if ctx.rank == 1:
        time.sleep(3600)
    return ctx.rank


def body_raise(ctx):
    if ctx.rank == 0:
        raise ValueError("boom from rank 0")
    # Stuck for good. (Not a barrier, and no communicator: rank 0's exit closes the store it
    # serves, and rank 1 then failed on its own with "rank 0 ... is gone", racing the grace period.)
    time.sleep(3600)


def body_die(ctx):
    if ctx.rank == 1:
        os._exit(3)
    time.sleep(3600)


def body_segfault(ctx):
    if ctx.rank == 1:
        import ctypes
        ctypes.string_at(0)  # SIGSEGV in C
    time.sleep(3600)


def body_checks(ctx):
    ctx.check.equal([1, 2], [1, 3], "deliberate mismatch")
    return "done"


def test_hanging_rank_is_killed_and_fails_the_test():
    t0 = time.monotonic()
    # ...and the report shows where it waited (its Python stack, dumped before the kill).
    with pytest.raises(pytest.fail.Exception,
                       match=r"(?s)ranks \[1\] did not finish within 3 s.*rank 1, where it waited.*body_hang"):
        run_world(2, "test_harness:body_hang", timeout=3, make_comm=False)
    assert time.monotonic() - t0 < 15


@pytest.mark.skipif(not shutil.which("gdb"), reason="no gdb (scripts/setup.sh installs it)")
def test_hanging_rank_report_has_its_native_stacks():
    # Below Python: the hung rank's threads as gdb sees them, its main thread asleep in the libc
    # call under time.sleep (where a real hang shows the CUDA call, lock or futex it waits in).
    with pytest.raises(pytest.fail.Exception, match=r"(?s)rank 1, native stacks \(gdb\):\nThread .*#0 .*sleep"):
        run_world(2, "test_harness:body_hang", timeout=3, make_comm=False)


def test_exception_in_a_rank_is_reported_with_its_traceback():
    t0 = time.monotonic()
    # Rank 1, still running, is shown where it waited.
    with pytest.raises(pytest.fail.Exception,
                       match=r"(?s)rank 0 raised.*ValueError: boom from rank 0.*body_raise.*rank 1, where it waited"):
        run_world(2, "test_harness:body_raise", timeout=60, grace=1, make_comm=False)
    assert time.monotonic() - t0 < 20, "the stuck peer was not killed after the grace period"


def test_rank_that_dies_silently_is_reported():
    with pytest.raises(pytest.fail.Exception, match=r"rank 1 exited with code 3 without reporting"):
        run_world(2, "test_harness:body_die", timeout=60, grace=1, make_comm=False)


def test_rank_that_crashes_is_reported_with_its_python_stack():
    """A segfault leaves no report from the rank: faulthandler's stacks stand in for one (the
    first GPU run had every rank die with -11 and nothing else to go on)."""
    with pytest.raises(pytest.fail.Exception,
                       match=r"(?s)rank 1 exited with code -11 without reporting; faulthandler.*body_segfault"):
        run_world(2, "test_harness:body_segfault", timeout=60, grace=1, make_comm=False)


def test_failed_checks_are_listed():
    with pytest.raises(pytest.fail.Exception, match=r"(?s)1 failed checks.*rank 0: deliberate mismatch"):
        run_world(1, "test_harness:body_checks", timeout=30, make_comm=False)
