"""Networks that fail, on the testbed (root + ip netns): two hosts with two NICs each (eth0,
eth1 on two subnets, 0.5 Gbit/s). A striping lane that does not connect falls back to one
network (and later communicators skip it at once); a network that dies under a stream of
messages or an all_reduce fails every rank within UCCL_TCP_DEAD_LINK_S, naming the peer across
it, instead of at the operation's timeout; after that the ranks can shrink and carry on.
Failures are made with Testbed.blackhole (a neighbour entry with a MAC nobody has)."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import TESTBED, launch, netbed  # noqa: F401  (conftest puts the testbed on sys.path)

pytestmark = pytest.mark.skipif(not netbed.netns_available(), reason="needs root and `ip netns add` (network namespaces)")


@pytest.mark.parametrize("key", ["", "lane-test-job-key-0123456789"], ids=["keyless", "keyed"])
def test_a_lane_that_does_not_connect_falls_back_to_one_network(key):
    """Striping over eth0 and eth1 while host 0 cannot reach host 1's eth1 (its packets there go
    nowhere): the striped attempt's socket on eth1 times out, and the connection falls back to
    one network instead of failing (keyless, the peer had assembled the first attempt's socket
    on eth0 and refused the second attempt's as a duplicate) and does not claim to be striped.
    A later communicator skips striping to the host that did not answer."""
    with netbed.Testbed(clusters=1, hosts=2, intra_gbit=0.5, rails=2) as bed:
        bed.blackhole((0, 0), (0, 1), rail=1)
        env = {"UCCL_SOCKET_IFNAME": "=eth0,eth1", "UCCL_TIMEOUT_S": "30", **({"UCCL_JOB_KEY": key} if key else {})}
        (row,) = launch.run(bed, 1, [os.path.join(TESTBED, "work_rails.py"), "4", "1", "--split"], env=env,
                            timeout=120)
    assert row["striped"] == [], row
    assert "10.211.1.2" in row["listen"][1], row  # host 1 did offer its eth1
    assert "fell back: striping over its address on each common network failed" in row["peers"][0], row
    # A second communicator of the same processes does not wait on that lane again (the process
    # remembers the host that did not answer): it connects over one network at once.
    assert "striping skipped: 10.211.1.2 did not answer a connect" in row["split_peers"][0], row
    assert "striped over" not in row["split_peers"][0], row
    assert row["gbit"] > 0.3, row  # the data went over eth0


def test_a_lane_that_dies_mid_stream_fails_both_ranks_within_the_dead_link_bound(tmp_path):
    """Rank 0 streams messages to rank 1 striped over eth0 and eth1; then eth1 drops everything
    between the two hosts (both ways). TCP alone would retransmit for ~15 minutes and the ranks
    would wait for the operation's timeout (600 s by default): with UCCL_TCP_DEAD_LINK_S=5 the
    sender fails when its eth1 socket's data gets no ACK for 5 s, and the receiver, which has
    nothing in flight, when that socket's keepalive probes go unanswered for 5 s; both errors name
    the peer and the network. (Both bounds end about together: the rank that sees it first tells
    the other over eth0, and that one reports it as the root cause.)"""
    sender, receiver = _run_with_dead_eth1(tmp_path, 1, ["8"])
    for r in (sender, receiver):
        assert r["kind"] == "RemoteError" and r["peer"] == 1 - r["rank"], r
        assert "10.211.1.0/24" in r["msg"] and "UCCL_TCP_DEAD_LINK_S" in r["msg"], r
        assert r["after_s"] < 30, r  # the bound is ~5 s (+ keepalive's rounding); the op timeout 60
    for r in (sender, receiver):
        assert ("host stopped acknowledging tcp socket 1" in r["msg"]
                or "stopped answering keepalive probes on tcp socket 1" in r["msg"]), r


def test_a_rail_that_dies_under_all_reduce_fails_every_rank_within_the_bound(tmp_path):
    """2 hosts x 2 ranks, rails by local rank (local rank 1 of each host on eth1 alone), all_reduce
    in a loop; then eth1 drops everything. Ranks 1 and 3 had sent their part (a send completes in
    the kernel) and wait to receive: with data unacknowledged TCP sends no keepalive probes, so the
    check runs while any request is pending. Every rank fails within the bound, the two on eth1
    naming each other, the others with that root cause. (Which verdict comes first is a race: a
    connection's second socket may have had all its data acknowledged before the link died, and
    its keepalive verdict falls due at the same bound; 1 run in 10 here.)"""
    results = _run_with_dead_eth1(tmp_path, 2, ["8", "all_reduce"])
    for r in results:
        assert r["kind"] == "RemoteError" and r["after_s"] < 30, r
        assert "stopped acknowledging" in r["msg"] or "stopped answering keepalive probes" in r["msg"], r
        assert "UCCL_TCP_DEAD_LINK_S" in r["msg"], r
    assert results[1]["peer"] == 3 and results[3]["peer"] == 1, results


def test_after_a_rail_dies_the_ranks_shrink_and_carry_on(tmp_path):
    """The same failure, then shrink(): ranks 1 and 3 each lost the other, the survivors' agreement
    leaves one of them out (it gets AbortedError), and the other three all_reduce on the new
    communicator (over shm and eth0): a job goes on after a NIC died."""
    results = _run_with_dead_eth1(tmp_path, 2, ["8", "all_reduce", "--shrink"])
    left_out = [r["rank"] for r in results if r["shrink"].get("kind") == "AbortedError"]
    assert len(left_out) == 1 and left_out[0] in (1, 3), results
    for r in results:
        if r["rank"] not in left_out:
            assert r["shrink"]["size"] == 3 and r["shrink"]["sum"] == 3.0, results


def _run_with_dead_eth1(tmp_path, per_host, args):
    """Runs work_dead_lane.py on 2 hosts with per_host ranks each (UCCL_SOCKET_IFNAME=
    "=eth0,eth1"); eth1 drops everything between the hosts once rank 0 created the flag file."""
    import threading
    flag = tmp_path / "flag"
    with netbed.Testbed(clusters=1, hosts=2, intra_gbit=0.5, rails=2) as bed:
        def kill_lane():
            deadline = time.time() + 60
            while not flag.exists() and time.time() < deadline:
                time.sleep(0.02)
            bed.blackhole((0, 0), (0, 1), rail=1)
            bed.blackhole((0, 1), (0, 0), rail=1)
        threading.Thread(target=kill_lane, daemon=True).start()
        env = {"UCCL_SOCKET_IFNAME": "=eth0,eth1", "UCCL_TIMEOUT_S": "60", "UCCL_TCP_DEAD_LINK_S": "5",
               "DEAD_LANE_FLAG": str(flag)}
        return launch.run(bed, per_host, [os.path.join(TESTBED, "work_dead_lane.py"), *args], env=env, timeout=120)


_STORE_SERVER = """
import sys, time, uccl
s = uccl.TcpStore("0.0.0.0", int(sys.argv[1]), is_server=True)
time.sleep(60)
"""
_STORE_CLIENT = """
import json, sys, time, uccl
c = uccl.TcpStore(sys.argv[1], int(sys.argv[2]))
c.set("before", b"1")
open(sys.argv[3], "w").write("go")
while open(sys.argv[3]).read() != "dead":
    time.sleep(0.02)
t = time.time()
try:
    c.set("after", b"2" * 100000)  # more than the link takes at once: some is in flight
    out = {"kind": "no error"}
except Exception as e:
    out = {"kind": type(e).__name__, "msg": str(e)}
out["after_s"] = time.time() - t
print("RESULT " + json.dumps(out), flush=True)
"""


def test_a_store_request_over_a_dead_link_fails_within_the_bound(tmp_path):
    """A store client whose link to the store's host dies: its next request goes unacknowledged,
    and the client fails it within UCCL_TCP_DEAD_LINK_S (5 s here, as in every test of this file:
    well above the ACK pauses of an overloaded host) naming the server, instead of waiting the
    store's timeout (300 s)."""
    flag = tmp_path / "flag"
    port = str(launch.MASTER_PORT + 7)
    env = launch.base_env({"UCCL_TCP_DEAD_LINK_S": "5"})
    with netbed.Testbed(clusters=1, hosts=2, intra_gbit=0.5) as bed:
        bed.popen(0, 0, [sys.executable, "-c", _STORE_SERVER, port], env=env)
        time.sleep(1.0)
        client = bed.popen(0, 1, [sys.executable, "-c", _STORE_CLIENT, bed.host_addr(0, 0), port, str(flag)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 30
        while not (flag.exists() and flag.read_text() == "go") and time.time() < deadline:
            time.sleep(0.02)
        bed.blackhole((0, 0), (0, 1), rail=0)
        bed.blackhole((0, 1), (0, 0), rail=0)
        flag.write_text("dead")
        out, err = client.communicate(timeout=60)
    res = [line for line in out.decode().splitlines() if line.startswith("RESULT ")]
    assert res, err.decode()[-2000:]
    r = json.loads(res[0][len("RESULT "):])
    assert r["kind"] == "RemoteError" and "stopped acknowledging" in r["msg"], r
    assert "UCCL_TCP_DEAD_LINK_S" in r["msg"] and r["after_s"] < 15, r
