"""Rank program: a network dies in the middle of a stream of operations.
p2p (2 hosts x 1 rank): rank 0 sends SIZE_MIB to rank 1 over and over; all_reduce (any layout):
every rank all_reduces SIZE_MIB over and over. After the third operation rank 0 creates the
file $DEAD_LANE_FLAG, and the test then makes the second network drop everything between the
two hosts. Each rank reports the error it got (kind, message, peer) and how long after the flag
it came.

    work_dead_lane.py SIZE_MIB [p2p|all_reduce] [--shrink]

--shrink: after the error, the ranks shrink() the communicator (the survivors agree on whom to
leave out) and all_reduce once on the new one; each reports the outcome.
"""
import json
import os
import sys
import time

import numpy as np

import uccl


def main():
    nbytes = int(float(sys.argv[1]) * (1 << 20))
    world = uccl.init()
    mode = sys.argv[2] if len(sys.argv) > 2 else "p2p"
    peer = 1 - world.rank
    buf = np.ones(nbytes // 4, np.float32)
    flag = os.environ["DEAD_LANE_FLAG"]
    out = {"rank": world.rank, "kind": "no error"}
    try:
        for i in range(100000):
            if mode == "all_reduce":
                world.all_reduce(buf)
            else:
                (world.send if world.rank == 0 else world.recv)(buf, peer)
            if i == 2 and world.rank == 0:
                with open(flag, "w") as f:
                    f.write(repr(time.time()))
    except uccl.UcclError as e:
        t = time.time()
        while not os.path.exists(flag):  # (rank 1 may fail before rank 0 wrote it: it did not)
            time.sleep(0.01)
        out = {"rank": world.rank, "kind": type(e).__name__, "msg": str(e), "peer": e.peer,
               "after_s": t - float(open(flag).read() or t), "iterations": i}
        if "--shrink" in sys.argv:  # carry on without the ranks cut off
            try:
                new = world.shrink(timeout=30)
                one = np.ones(1024, np.float32)
                new.all_reduce(one)
                out["shrink"] = {"size": new.size, "rank": new.rank, "sum": float(one[0]), "s": time.time() - t}
            except uccl.UcclError as e2:
                out["shrink"] = {"kind": type(e2).__name__, "msg": str(e2)}
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
