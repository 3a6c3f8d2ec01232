"""Rails on the testbed: two hosts with two NICs each on two separate shaped networks.

    python benchmarks/testbed/rails_bench.py [--gbit 0.5] [--size 32] [--iters 3]

Runs work_rails.py (host 0's local rank l sends to host 1's local rank l, all at once):
  one pair            1 rank per host, eth0 only: one NIC's rate
  2 ranks, one NIC    UCCL_SOCKET_IFNAME==eth0: both ranks of a host share eth0
  2 ranks, rails      UCCL_SOCKET_IFNAME="=eth0;=eth1": local rank i binds to eth<i>
  1 rank, striped     UCCL_SOCKET_IFNAME="=eth0,eth1": one rank per host listens on both NICs,
                      and its tcp connection stripes its sockets over the two subnets
  2 ranks, rails by local rank
                      UCCL_SOCKET_IFNAME="=eth0,eth1", no list: local rank i takes rail i itself
and prints the aggregate rate of each (rails and striping should reach about twice one NIC's rate).

    python benchmarks/testbed/rails_bench.py --slow-rail 0.5 [--gbit 0.5]

A second NIC slower than it reports (eth1 shaped at 0.5 x --gbit; both veths say 10 Gbit/s, so
the reported rates weigh them alike), one rank per host striping over both:
  one pair            eth0 only: the fast NIC's rate
  striped, static     UCCL_TCP_STRIPE=static: equal halves, the slow NIC sets the time (about
                      twice the slow rate)
  striped, adaptive   UCCL_TCP_STRIPE=adaptive (the default): chunks go to whichever socket
                      drains, so the rate approaches the sum of the two NICs' rates

    python benchmarks/testbed/rails_bench.py --busy-rail [--gbit 0.5]

The same cases with both NICs at --gbit but eth1 busy: an iperf3 TCP stream from host 0 to host 1
over eth1 runs through every case (another job's traffic on the rail), so uccl's socket there
gets about half of it.
"""
import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import launch  # noqa: E402
from netbed import Testbed  # noqa: E402

CASES = [("one pair", 1, "=eth0"), ("2 ranks, one NIC", 2, "=eth0"), ("2 ranks, rails", 2, "=eth0;=eth1"),
         ("1 rank, striped", 1, "=eth0,eth1"), ("2 ranks, rails by local rank", 2, "=eth0,eth1")]

SLOW_RAIL_CASES = [("one pair", 1, "=eth0"),
                   ("1 rank, striped, static", 1, "=eth0,eth1", {"UCCL_TCP_STRIPE": "static"}),
                   ("1 rank, striped, adaptive", 1, "=eth0,eth1", {"UCCL_TCP_STRIPE": "adaptive"})]


@contextlib.contextmanager
def busy_eth1(bed, seconds):
    """An iperf3 TCP stream from host 0 to host 1 over eth1 (the rail's other user) meanwhile."""
    server = bed.popen(0, 1, ["iperf3", "-s", "-1", "-B", bed.host_addr(0, 1, 1)], env=dict(os.environ),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    client = bed.popen(0, 0, ["iperf3", "-c", bed.host_addr(0, 1, 1), "-B", bed.host_addr(0, 0, 1), "-t",
                              str(seconds)], env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # past slow start
    try:
        yield
    finally:
        for p in (client, server):
            if p.poll() is None:
                p.kill()


def run(gbit, size, iters, cases=CASES, slow_rail=None, busy_rail=False):
    rows = []
    rail_gbit = [gbit * slow_rail] if slow_rail else None
    with Testbed(clusters=1, hosts=2, intra_gbit=gbit, rails=2, rail_gbit=rail_gbit) as bed:
        for name, per_host, ifname, *extra in cases:  # extra: a dict of more variables
            env = {"UCCL_SOCKET_IFNAME": ifname, **(extra[0] if extra else {})}
            with busy_eth1(bed, 600) if busy_rail else contextlib.nullcontext():
                res = launch.run(bed, per_host, [os.path.join(HERE, "work_rails.py"), str(size), str(iters)],
                                 env=env, timeout=300)
            rows.append({"case": name, "ifname": ifname, "shaped_gbit": gbit, "eth1_gbit": (rail_gbit or [gbit])[0],
                         "eth1_busy": busy_rail, **res[0]})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gbit", type=float, default=0.5)
    ap.add_argument("--size", type=float, default=32)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--slow-rail", type=float, default=None,
                    help="shape eth1 at this fraction of --gbit and run the slow-rail cases")
    ap.add_argument("--busy-rail", action="store_true",
                    help="an iperf3 stream shares eth1 throughout; runs the slow-rail cases")
    a = ap.parse_args()
    cases = SLOW_RAIL_CASES if a.slow_rail or a.busy_rail else CASES
    for row in run(a.gbit, a.size, a.iters, cases=cases, slow_rail=a.slow_rail, busy_rail=a.busy_rail):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
