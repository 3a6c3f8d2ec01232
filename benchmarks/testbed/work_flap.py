"""Rank program: all_reduce in a loop while the test takes the network down for a while and back.

    work_flap.py SIZE_MIB

Every rank all_reduces SIZE_MIB (sum checked) over and over. After the third call rank 0 creates
$FLAP_FLAG ("go"); the test then makes the link drop everything, brings it back, and writes the
time it healed into the flag; the ranks stop together once one of them sees 2 s since then. (A
test that takes the link down before the first call writes the flag itself: rank 0 leaves it.
With $FLAP_HOLD set, each rank creates $FLAP_FLAG.rank<r> after init and waits for the flag.) Each
rank prints ``RESULT {"rank", "kind", "msg", "calls", "longest_s", "resumed_after_s"}``: kind is
"no error" or the error's class, longest_s the longest round (the stop vote and the all_reduce:
an outage may stall either), resumed_after_s how long after the heal the first call finished.
"""
import json
import os
import sys
import time

import numpy as np

import uccl


def main():
    n = int(float(sys.argv[1]) * (1 << 20)) // 4
    world = uccl.init()
    flag = os.environ["FLAP_FLAG"]
    if os.environ.get("FLAP_HOLD"):  # the test breaks the network between init and the first call
        open(f"{flag}.rank{world.rank}", "w").close()
        while not os.path.exists(flag):
            time.sleep(0.01)
    buf = np.ones(n, np.float32)
    out = {"rank": world.rank, "kind": "no error", "calls": 0, "longest_s": 0.0, "resumed_after_s": None}
    ends = []
    stop = np.zeros(1, np.float32)
    try:
        while True:
            text = open(flag).read() if os.path.exists(flag) else ""
            healed = float(text) if text not in ("", "go") else None
            # Timed from here: an outage may stall either call of the round (the stop vote too).
            t = time.time()
            stop[0] = healed is not None and t > healed + 2
            world.all_reduce(stop, op="max")  # all ranks stop after the same call
            if stop[0]:
                break
            buf[:] = 1
            world.all_reduce(buf)
            ends.append(time.time())
            out["longest_s"] = max(out["longest_s"], ends[-1] - t)
            if buf[0] != world.size or buf[-1] != world.size:
                raise AssertionError(f"all_reduce gave {buf[0]}, {buf[-1]}")
            out["calls"] += 1
            if out["calls"] == 3 and world.rank == 0 and not os.path.exists(flag):
                with open(flag, "w") as f:
                    f.write("go")
    except (uccl.UcclError, AssertionError) as e:
        out.update(kind=type(e).__name__, msg=str(e))
    healed = float(open(flag).read()) if os.path.exists(flag) and open(flag).read() not in ("", "go") else None
    after = [e - healed for e in ends if healed is not None and e > healed]
    out["resumed_after_s"] = after[0] if after else None
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
