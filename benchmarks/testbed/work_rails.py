"""Rank program: throughput of the rails. 2 hosts x R ranks: local rank l of host 0 sends
SIZE_MIB to local rank l of host 1, all rails at once, ITERS times; rank 0 prints the
aggregate rate (all bytes over the slowest pair's time), every rank's describe() first line
(which NIC it listens on) and rank 0's connection lines (all, and those that say they are striped).

    work_rails.py SIZE_MIB ITERS [--split]

--split: then a second communicator (world.split) connects the same pairs, and rank 0 also
reports its peer lines and how long its first message took (the connection's set-up, as
connect_s does for the world's).
"""
import json
import sys
import time

import numpy as np

import uccl


def main():
    nbytes, iters = int(float(sys.argv[1]) * (1 << 20)), int(sys.argv[2])
    world = uccl.init()
    per_host = world.size // 2
    peer = (world.rank + per_host) % world.size
    sender = world.rank < per_host
    buf = np.ones(nbytes, np.uint8)
    # warm-up: connection
    t0 = time.perf_counter()
    (world.send if sender else world.recv)(buf[:1024], peer)
    connect_s = time.perf_counter() - t0
    world.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        (world.send if sender else world.recv)(buf, peer)
    t = time.perf_counter() - t0
    slowest = float(world.all_reduce(np.array([t]), op="max")[0])
    text = world.describe().splitlines()
    first = text[0]
    striped = [line.strip() for line in text if "striped over" in line]
    peers = [line.strip() for line in text if line.strip().startswith("peer ")]
    lines = world.all_gather(np.frombuffer(first.encode().ljust(256)[:256], np.uint8))
    extra = {}
    if "--split" in sys.argv:
        group = world.split(0)
        t0 = time.perf_counter()
        (group.send if sender else group.recv)(buf[:1024], peer)
        extra = {"split_connect_s": time.perf_counter() - t0,
                 "split_peers": [line.strip() for line in group.describe().splitlines() if line.strip().startswith("peer ")]}
    if world.rank == 0:
        gbit = per_host * nbytes * iters * 8 / slowest / 1e9
        print("RESULT " + json.dumps({"rank": 0, "gbit": gbit, "seconds": slowest, "pairs": per_host, "striped": striped,
                                      "peers": peers, "connect_s": connect_s, **extra,
                                      "listen": [bytes(lines[i * 256:(i + 1) * 256]).decode().strip()
                                                 for i in range(world.size)]}), flush=True)
    world.barrier()


if __name__ == "__main__":
    main()
