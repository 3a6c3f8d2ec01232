"""Rank program: how long the engine is held while it dials a peer whose host does not answer.

    work_dialing.py

Two ranks, one per host. Each rank creates $WORK_FLAG.rank<r> after init and waits for the flag
to hold "go" (the test has made every connection request get lost by then). Rank 1 posts a
receive from rank 0, rank 0 the matching send, so rank 0's engine starts dialing; while the op is
pending each rank calls describe() (which takes its engine's lock, as every new operation does)
in a loop, until the test writes "healed" into the flag; then both wait for the message. Each
rank prints ``RESULT {"rank", "calls", "longest_s", "describe", "ok", "kind", "msg"}``:
longest_s is the longest describe() call while the connection was being made, describe the last
one's text, ok whether the message arrived intact.
"""
import json
import os
import time

import numpy as np

import uccl


def main():
    world = uccl.init()
    flag = os.environ["WORK_FLAG"]
    open(f"{flag}.rank{world.rank}", "w").close()

    def state():
        return open(flag).read() if os.path.exists(flag) else ""

    while state() != "go":
        time.sleep(0.01)
    out = {"rank": world.rank, "calls": 0, "longest_s": 0.0, "ok": False, "kind": "no error", "msg": ""}
    buf = np.arange(1 << 16, dtype=np.float32) if world.rank == 0 else np.zeros(1 << 16, np.float32)
    try:
        work = world.send(buf, 1, async_op=True) if world.rank == 0 else world.recv(buf, 0, async_op=True)
        while state() != "healed":
            t = time.perf_counter()
            out["describe"] = world.describe()  # the last one, from well into the outage
            out["longest_s"] = max(out["longest_s"], time.perf_counter() - t)
            out["calls"] += 1
            time.sleep(0.005)
        work.wait()
        out["ok"] = bool(np.array_equal(buf, np.arange(1 << 16, dtype=np.float32)))
    except uccl.UcclError as e:
        out.update(kind=type(e).__name__, msg=str(e))
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
