"""uccl's TCP store server (cpp/bootstrap/tcp_store_server.cc) answers a writer before any waiter.

Why it matters: the server lives in rank 0, and a rank 0 that waits for the others' "done" key
and then exits took the server with it while the writer's reply was still queued behind the
waiter's: the writer's set failed with "closed the connection after 0 of 24 expected bytes"
(tests/test_errors.py::test_abort_from_another_thread_unblocks_pending_recv failed so in a CI
dry run of 2026-12-06). Under the load below, a build with the old order failed both tests in
each of two runs (the add test lost 16 and 18 replies of 300); this order lost none in three
runs, nor in 3600 rounds of a separate loop.

The other way round, a serving process that sets a key and exits at once, cannot be made safe by
any order: a waiter between two of its 50 ms wait slices (or not connected yet) has a request
the dead server never reads. A serving process must outlive the waiters of the keys it sets, as
with torch's TCPStore. A quick check of that pattern lost 9 of 300 waiters with this order, and
still 1-3 of 300 with an order that answered other processes first (tried, not kept)."""
import multiprocessing as mp
import os
import time

import uccl


def _serve_wait_and_exit(port_q, key):
    store = uccl.TcpStore("127.0.0.1", 0, is_server=True, timeout=10)
    port_q.put(store.port)
    store.wait([key], 10)
    os._exit(0)  # at once, as a harness rank or a launcher's rank 0 leaves


def _spin(stop):
    while not stop.is_set():
        pass


def _rounds(op, rounds):
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    # Busy processes on both cores: the server thread gets preempted between its two replies.
    load = [ctx.Process(target=_spin, args=(stop,), daemon=True) for _ in range(2)]
    for p in load:
        p.start()
    failures = []
    try:
        for i in range(rounds):
            q = ctx.Queue()
            server = ctx.Process(target=_serve_wait_and_exit, args=(q, "done"))
            server.start()
            client = uccl.TcpStore("127.0.0.1", q.get(timeout=10), timeout=10)
            time.sleep(0.001)  # let the server park its wait first
            try:
                op(client)
            except uccl.UcclError as e:
                failures.append(f"round {i}: {type(e).__name__}: {e}")
            server.join(10)
    finally:
        stop.set()
        for p in load:
            p.join(5)
    return failures


def test_a_set_is_acknowledged_even_if_the_waiting_server_exits_at_once():
    failures = _rounds(lambda c: c.set("done", b"1"), 600)
    assert not failures, f"{len(failures)} of 600 writers lost their reply; first: {failures[0]}"


def test_an_add_is_acknowledged_even_if_the_waiting_server_exits_at_once():
    failures = _rounds(lambda c: c.add("done", 1), 300)
    assert not failures, f"{len(failures)} of 300 adders lost their reply; first: {failures[0]}"
