"""Rank program: a rank dies, and the survivors shrink while connection requests get lost.

    work_lossy_shrink.py

Every rank all_reduces once (the data connections are made), creates $WORK_FLAG.rank<r> and
waits for the flag to hold "go" (the test has made every new connection request between the
hosts get lost by then, for a while). Then the last rank exits; the others all_reduce, fail,
shrink() (their agreement opens a connection per request) and all_reduce once on the new
communicator. Each survivor prints ``RESULT {"rank", "kind", "msg", "size", "sum", "s"}``: the
shrink's outcome (kind "no error", or the error's class), the new size, the sum of ones over
it, and how long the shrink took.
"""
import json
import os
import time

import numpy as np

import uccl


def main():
    world = uccl.init()
    flag = os.environ["WORK_FLAG"]
    buf = np.ones(1024, np.float32)
    world.all_reduce(buf)
    open(f"{flag}.rank{world.rank}", "w").close()
    while not (os.path.exists(flag) and open(flag).read() == "go"):
        time.sleep(0.01)
    if world.rank == world.size - 1:
        os._exit(0)
    out = {"rank": world.rank, "kind": "no error", "msg": ""}
    try:
        world.all_reduce(buf)
        out.update(kind="RuntimeError", msg="the all_reduce with a dead rank succeeded")
    except uccl.UcclError:
        t = time.time()
        try:
            new = world.shrink(timeout=30)
            one = np.ones(16, np.float32)
            new.all_reduce(one)
            out.update(size=new.size, sum=float(one[0]), s=time.time() - t)
        except uccl.UcclError as e:
            out.update(kind=type(e).__name__, msg=str(e), s=time.time() - t)
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
