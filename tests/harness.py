"""Runs one scenario on `world` real processes on loopback and brings back what each rank returned.

    results = run_world(4, "test_collectives:all_reduce_sweep", args=(...), transport="tcp")

Design (speed and never hanging):
  * the ranks are started once per scenario (multiprocessing "spawn": a clean interpreter, no
    inherited threads or sockets), and each runs many checks against a numpy reference;
  * the target is named "module:function" and imported in the child only AFTER its environment
    is set up (UCCL_* variables, per-rank UCCL_HOST_ID for the "mixed" scenarios), because uccl
    reads its configuration once per process;
  * every child sends ("ok", rank, value) or ("error", rank, traceback) through one queue;
  * a hard deadline kills every straggler and fails the test, and once one rank has failed the
    others get a short grace period (they are usually stuck waiting for it) before being killed.

Inside a child the target is called as fn(ctx, *args) where ctx has rank, world, port, comm
(unless make_comm=False), store and check (a Checker that records mismatches instead of stopping
at the first, so that one run reports every failing op/dtype/count).
"""
import faulthandler
import importlib
import multiprocessing as mp
import os
import queue as queue_mod
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

import pytest

MAX_FAILURES_SHOWN = 40


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Checker:
    """Collects failed checks (op, dtype, count, what) instead of raising at the first one."""

    def __init__(self, rank):
        self.rank = rank
        self.failures = []
        self.count = 0

    def fail(self, what):
        self.failures.append(f"rank {self.rank}: {what}")

    def equal(self, got, want, what):
        import numpy as np
        self.count += 1
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape:
            self.fail(f"{what}: shape {got.shape} != expected {want.shape}")
            return False
        if got.dtype != want.dtype:
            self.fail(f"{what}: dtype {got.dtype} != expected {want.dtype}")
            return False
        if got.tobytes() != want.tobytes():
            g = got.reshape(-1).view(np.uint8).reshape(got.size, -1)
            w = want.reshape(-1).view(np.uint8).reshape(want.size, -1)
            bad = np.flatnonzero((g != w).any(axis=1))
            first = int(bad[0]) if len(bad) else -1
            self.fail(f"{what}: {len(bad)} of {got.size} elements differ; first at [{first}]: "
                      f"got {got.reshape(-1)[first]!r}, expected {want.reshape(-1)[first]!r}")
            return False
        return True

    def close(self, got, want, what, rtol, atol):
        import numpy as np
        self.count += 1
        got64, want64 = np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)
        if got64.shape != want64.shape:
            self.fail(f"{what}: shape {got64.shape} != expected {want64.shape}")
            return False
        if np.asarray(got).dtype != np.asarray(want).dtype:
            self.fail(f"{what}: dtype {np.asarray(got).dtype} != expected {np.asarray(want).dtype}")
            return False
        ok = np.isclose(got64, want64, rtol=rtol, atol=atol, equal_nan=True)
        if not ok.all():
            bad = np.flatnonzero(~ok)
            i = int(bad[0])
            self.fail(f"{what}: {len(bad)} of {got64.size} elements outside rtol={rtol} atol={atol}; "
                      f"first at [{i}]: got {got64[i]!r}, expected {want64[i]!r}")
            return False
        return True

    def true(self, cond, what):
        self.count += 1
        if not cond:
            self.fail(what)
        return bool(cond)


class Ctx:
    def __init__(self, rank, world, port, host_id=None):
        self.rank, self.world, self.port, self.host_id = rank, world, port, host_id
        self.comm = None
        self.store = None
        self.check = Checker(rank)
        self.linger = True


_CRASH_FILE = None  # kept open for faulthandler


def crash_file(crash_dir, rank):
    return os.path.join(crash_dir, f"rank{rank}.crash")


def _child(rank, world, port, target, args, env, make_comm, comm_kwargs, q, crash_dir):
    global _CRASH_FILE
    # A fatal signal (SIGSEGV, SIGABRT...) leaves no report: faulthandler writes every thread's
    # Python stack to a file the parent shows with "exited with code -11".
    _CRASH_FILE = open(crash_file(crash_dir, rank), "w")
    faulthandler.enable(file=_CRASH_FILE, all_threads=True)
    # A rank still running when the parent gives up on it gets SIGUSR1 first: its stacks show
    # where it waited (the parent prints them with "still running ... (killed)").
    faulthandler.register(signal.SIGUSR1, file=_CRASH_FILE, all_threads=True)
    try:
        os.environ.update(env)
        module, _, name = target.partition(":")
        here = os.path.dirname(os.path.abspath(__file__))
        if here not in sys.path:
            sys.path.insert(0, here)
        fn = getattr(importlib.import_module(module), name)
        ctx = Ctx(rank, world, port, env.get("UCCL_HOST_ID"))
        if make_comm:
            import uccl
            ctx.store = uccl.TcpStore("127.0.0.1", port, is_server=(rank == 0), timeout=30)
            ctx.comm = uccl.Communicator(rank, world, ctx.store, **comm_kwargs)
        value = fn(ctx, *args)
        q.put(("ok", rank, {"value": value, "failures": ctx.check.failures, "checks": ctx.check.count}))
        # Keep the store (served by rank 0) and the connections up until every rank is done, so
        # that no rank tears down a socket a peer still reads from. Tests that leave the
        # communicator failed set ctx.linger = False.
        if ctx.linger and ctx.comm is not None:
            ctx.comm.barrier()
    except BaseException as e:  # noqa: BLE001 - everything must reach the parent
        q.put(("error", rank, f"{type(e).__module__}.{type(e).__name__}: {e}\n{traceback.format_exc()}"))
        _leave(q, 1)
    _leave(q, 0)


def native_stacks(pid, timeout=45.0, limit=8000):
    """Every thread's native stack of a live process, from gdb (cuda-gdb on the GPU machines,
    which have no gdb) attached in batch mode: where a hang waits below Python - a CUDA call, a
    lock, a futex, poll. Python stacks (faulthandler) stop at the C++ call; the third GPU
    session's hangs had to be diagnosed without this. "" when no debugger is there, the attach
    fails or takes longer than `timeout`; TEST_NATIVE_STACKS=0 turns it off."""
    gdb = shutil.which("gdb") or shutil.which("cuda-gdb")
    if not gdb or os.environ.get("TEST_NATIVE_STACKS", "1") == "0":
        return ""
    # The innermost frames of each thread say what it waits in; lines cut (gdb prints arguments).
    cmd = [gdb, "-q", "-nx", "-batch", "-p", str(pid), "-ex", "set pagination off", "-ex", "thread apply all bt 12"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    # Threads that only idle (OpenMP's pool, the debugger's own) are left out, and uccl's come
    # first: a 2026-11-28 dump was cut at the limit before reaching the progress thread.
    threads, cur = [], None
    for ln in out.splitlines():
        if ln.startswith("Thread "):
            cur = [ln[:200]]
            threads.append(cur)
        elif ln.startswith("#") and cur is not None:
            cur.append(ln[:200])
    idle = ("gomp_thread_start", "libcudadebugger")  # an OpenMP worker, the debugger's helper
    busy = [t for t in threads if len(t) > 1 and not any(m in ln for ln in t[1:] for m in idle)]
    # A simulated device's stream worker with nothing queued (its own loop is the first uccl
    # frame) goes last: a soak's ranks have a dozen, and they filled the dump before the thread
    # that hung (2026-11-29).
    def idle_stream(t):
        first = next((ln for ln in t[1:] if "uccl" in ln), "")
        return "SimStream::SimStream" in first
    busy.sort(key=lambda t: (not any("uccl" in ln for ln in t), idle_stream(t)))
    text = "\n".join(ln for t in busy for ln in t)
    return text[:limit] + ("\n..." if len(text) > limit else "")


def _crash_text(crash_dir, rank, limit=6000, header="; faulthandler (Python stacks at the crash):\n"):
    """What faulthandler wrote for a rank that died by a fatal signal, or dumped on SIGUSR1
    ("" if nothing)."""
    try:
        with open(crash_file(crash_dir, rank)) as f:
            text = f.read()
    except OSError:
        return ""
    if not text.strip():
        return ""
    if len(text) > limit:
        text = "...\n" + text[-limit:]
    return header + text


def _leave(q, code):
    """Flushes the report through the queue, then exits without interpreter teardown
    (destructors racing with peers that already left would only add noise)."""
    sys.stdout.flush()
    sys.stderr.flush()
    q.close()
    q.join_thread()
    os._exit(code)


def mixed_hosts(world, groups=2):
    """UCCL_HOST_ID per rank: consecutive ranks share a host ("a", "b", ...)."""
    per = max(1, -(-world // groups))
    return [chr(ord("a") + r // per) for r in range(world)]


def run_world(world, target, args=(), *, env=None, rank_env=None, host_ids=None, timeout=120.0,
              grace=5.0, make_comm=True, expect_exit=None, comm_timeout=30, **comm_kwargs):
    """Runs target ("module:function") on `world` ranks; returns the per-rank values in rank order.

    env: extra environment for every rank; rank_env(rank) -> dict for per-rank additions;
    host_ids: UCCL_HOST_ID per rank (the "mixed" transport scenarios). comm_kwargs go to
    uccl.Communicator (transport=, algorithm=...; its timeout= is comm_timeout, because
    `timeout` is the harness's hard deadline for the whole scenario). expect_exit: ranks allowed to die
    without reporting (the SIGKILL tests). Fails the test on any error, failed check or timeout.
    """
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    crash_dir = tempfile.mkdtemp(prefix="uccl-harness-")
    comm_kwargs["timeout"] = comm_timeout
    procs = []
    for r in range(world):
        e = {"UCCL_DEBUG": os.environ.get("UCCL_DEBUG", "NONE")}
        e.update(env or {})
        if host_ids is not None:
            e["UCCL_HOST_ID"] = host_ids[r]
        if rank_env is not None:
            e.update(rank_env(r))
        p = ctx.Process(target=_child, args=(r, world, port, target, args, e, make_comm, comm_kwargs, q, crash_dir),
                        name=f"uccl-rank{r}", daemon=True)
        p.start()
        procs.append(p)
    expect_exit = set(expect_exit or ())
    results, errors = {}, {}
    deadline = time.monotonic() + timeout
    first_error_at = None
    dead_since = {}

    def settled():
        done = set(results) | set(errors)
        return all(r in done or (r in expect_exit and procs[r].exitcode is not None) for r in range(world))

    try:
        while not settled():
            now = time.monotonic()
            if now > deadline or (first_error_at is not None and now > first_error_at + grace):
                break
            try:
                kind, rank, payload = q.get(timeout=0.1)
            except queue_mod.Empty:
                # A rank that died without reporting (segfault, SIGKILL) is an error, once its
                # report had time to come through the pipe.
                for r, p in enumerate(procs):
                    if r in results or r in errors or r in expect_exit or p.exitcode is None:
                        continue
                    dead_since.setdefault(r, now)
                    if now - dead_since[r] > 1.0:
                        errors[r] = f"rank {r} exited with code {p.exitcode} without reporting" + _crash_text(crash_dir, r)
                        first_error_at = first_error_at or now
                continue
            if kind == "ok":
                results[rank] = payload
            else:
                errors[rank] = payload
                first_error_at = first_error_at or time.monotonic()
        # Let the ranks leave on their own (final barrier), then kill whatever is left.
        end = time.monotonic() + (grace if settled() and not errors else 0.5)
        for p in procs:
            p.join(timeout=max(0.0, end - time.monotonic()))
    finally:
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        native = {r: native_stacks(procs[r].pid) for r in hung[:int(os.environ.get("UCCL_HARNESS_STACKS", 2))]}  # first, while they still wait
        for r in hung:
            try:
                os.kill(procs[r].pid, signal.SIGUSR1)
            except OSError:
                pass
        if hung:
            time.sleep(0.5)
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(timeout=5)
        q.close()
        q.cancel_join_thread()
        hung_stacks = {r: _crash_text(crash_dir, r, limit=4000, header=":\n") for r in hung}
        shutil.rmtree(crash_dir, ignore_errors=True)
    missing = [r for r in range(world) if r not in results and r not in errors and r not in expect_exit]
    msgs = []
    for r in sorted(errors):
        msgs.append(f"--- rank {r} raised ---\n{errors[r]}")
    if missing and errors:
        msgs.append(f"--- ranks {missing} were still running {grace:.0f} s after the first failure (killed) ---")
    elif missing:
        msgs.append(f"--- ranks {missing} did not finish within {timeout:.0f} s (killed) ---")
    for r in missing:
        if hung_stacks.get(r):
            msgs.append(f"--- rank {r}, where it waited" + hung_stacks[r])
        if native.get(r):
            msgs.append(f"--- rank {r}, native stacks (gdb):\n" + native[r])
    failures = [f for r in sorted(results) for f in results[r]["failures"]]
    if failures:
        shown = failures[:MAX_FAILURES_SHOWN]
        more = f"\n... and {len(failures) - len(shown)} more" if len(failures) > len(shown) else ""
        msgs.append(f"--- {len(failures)} failed checks ---\n" + "\n".join(shown) + more)
    if msgs:
        pytest.fail(f"scenario {target} world={world} {comm_kwargs} env={env} host_ids={host_ids}:\n" +
                    "\n".join(msgs), pytrace=False)
    out = WorldResults(results[r]["value"] if r in results else None for r in range(world))
    out.pids = [p.pid for p in procs]
    out.checks = sum(results[r]["checks"] for r in results)
    return out


class WorldResults(list):
    """The per-rank values, plus .pids (the ranks' process ids) and .checks (checks run)."""
    pids = ()
    checks = 0


