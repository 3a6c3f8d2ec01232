"""Rank program: a lane of a striped connection dies in the middle of a stream of messages.
2 hosts x 1 rank: rank 0 sends SIZE_MIB to rank 1 over and over; after its third message it
creates the file $DEAD_LANE_FLAG, and the test then makes the second network drop everything
between the two hosts. Each rank reports the error it got (kind, message, peer) and how long
after the flag it came.

    work_dead_lane.py SIZE_MIB
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
    peer = 1 - world.rank
    buf = np.ones(nbytes, np.uint8)
    flag = os.environ["DEAD_LANE_FLAG"]
    out = {"rank": world.rank, "kind": "no error"}
    try:
        for i in range(100000):
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
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
