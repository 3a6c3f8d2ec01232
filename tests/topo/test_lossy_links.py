"""Networks that lose packets or go down for a while, and come back, on the testbed (root + ip
netns): two hosts, eth0 at 0.5-4 Gbit/s; losses made with nftables on each host's input
(Testbed.lossy: random drops, everything, or only connection requests). A live but bad link must
cost time, never a false "dead link", a wrong diagnosis or a wrong result; a link dead for the
whole of UCCL_TCP_DEAD_LINK_S still fails the job (tests/topo/test_dead_links.py)."""
import glob
import json
import os
import time

import pytest

from conftest import TESTBED, launch, netbed  # noqa: F401  (conftest puts the testbed on sys.path)

pytestmark = pytest.mark.skipif(not netbed.netns_available(), reason="needs root and `ip netns add` (network namespaces)")


def _flap(tmp_path, down_s, env, syn_only=False):
    """2 hosts x 2 ranks all_reduce 4 MiB in a loop (work_flap.py); the link drops everything (or
    only connection requests, from before the first call) for down_s, then heals."""
    flag = str(tmp_path / "flap")
    env = {"UCCL_TIMEOUT_S": "60", "FLAP_FLAG": flag, **env, **({"FLAP_HOLD": "1"} if syn_only else {})}
    with netbed.Testbed(clusters=1, hosts=2, intra_gbit=0.5) as bed:
        procs = launch.start(bed, 2, [os.path.join(TESTBED, "work_flap.py"), "4"], env=env)
        deadline = time.time() + 60
        if syn_only:  # every rank has initialised; the first call will connect
            while len(glob.glob(flag + ".rank*")) < 4 and time.time() < deadline:
                time.sleep(0.02)
            bed.lossy(100, syn_only=True)
            open(flag, "w").write("go")
        else:
            while not os.path.exists(flag) and time.time() < deadline:
                time.sleep(0.02)
            bed.lossy(100)
        time.sleep(down_s)
        bed.lossy(0)
        open(flag + ".tmp", "w").write(repr(time.time()))
        os.replace(flag + ".tmp", flag)
        return launch.wait(procs, timeout=120)


def test_a_link_down_for_most_of_the_bound_is_not_a_dead_link(tmp_path):
    """The link drops everything for 14 s under a stream of all_reduces (UCCL_TCP_DEAD_LINK_S at
    its default, 20 s). TCP's exponential backoff had put the next retransmission ~25 s after the
    outage began, so no ACK came for 20 s and both ranks failed with a dead link although the link
    was back; retransmitting at least once a second (TCP_RTO_MAX_MS), the ranks resume within a
    second or two of the heal and no call fails."""
    rows = _flap(tmp_path, 14, {})
    for r in rows:
        assert r["kind"] == "no error", r
        assert r["longest_s"] > 10, r  # the outage was felt
        assert r["resumed_after_s"] is not None and r["resumed_after_s"] < 5, r


def test_connection_requests_lost_for_a_while_are_retried_not_taken_for_an_exit(tmp_path):
    """Every connection request (SYN) is lost for 5 s when the ranks first connect across the
    hosts (a lossy or congested network loses SYNs as well). A connect that got no answer in its
    2 s window failed the peer, and the higher rank's probe of a lower rank that had not connected
    yet (0.3 s) reported it "not listening any more (it exited before connecting)" - wrong, it
    was alive. No answer is now tried again until the dead-link bound; only a refusal means
    the peer is gone."""
    rows = _flap(tmp_path, 5, {"UCCL_PROBE": "off"}, syn_only=True)
    for r in rows:
        assert r["kind"] == "no error", r
        assert r["calls"] > 3, r


def test_connection_requests_lost_for_longer_than_the_bound_fail_naming_the_peer(tmp_path):
    """The same, lost for 8 s with UCCL_TCP_DEAD_LINK_S=4: the ranks give up once the peer's host
    has not answered for the bound, saying so (not "exited"), and name it."""
    rows = _flap(tmp_path, 8, {"UCCL_PROBE": "off", "UCCL_TCP_DEAD_LINK_S": "4"}, syn_only=True)
    for r in rows:
        assert r["kind"] == "RemoteError", r
        assert "has not answered a connect for" in r["msg"] and "UCCL_TCP_DEAD_LINK_S" in r["msg"], r
        assert "exited" not in r["msg"].split("root cause")[0], r


def test_a_lossy_link_costs_time_but_no_call_fails_or_is_wrong():
    """15% of the packets lost at random each way, 2 hosts x 2 ranks, 40 random collectives and
    p2p rings (every result checked exactly) over four communicators, each connecting anew. Before,
    such runs failed: keepalive's 3 probes all lost, a connect's 2 s window missed, a probe's SYN
    lost read as an exited peer, or backoff past the dead-link bound."""
    with netbed.Testbed(clusters=1, hosts=2, intra_gbit=4.0) as bed:
        bed.lossy(15)
        rows = launch.run(bed, 2, [os.path.join(TESTBED, "work_mixed.py"), "40", "262144", "3", "4"],
                          env={"UCCL_TIMEOUT_S": "120", "UCCL_PROBE": "off"}, timeout=300)
    assert len(rows) == 4
    for r in rows:
        assert r["nbad"] == 0, r


def test_dialing_a_host_that_does_not_answer_never_holds_the_engine(tmp_path):
    """Every connection request lost for 5 s while rank 0 (the lower rank, which connects) has a
    send to rank 1 pending: its engine dials in steps from its progress loop, so a call that needs
    the engine (describe(), as every new operation) waits milliseconds, not a connect window (2 s
    per socket; a blocking connect held the engine for all of it: 6 s here). Rank 1, which only
    accepts, probes rank 0's listener after a second of waiting; that dials in steps too (it held
    the engine 0.3 s per probe). describe() says what each side waits for. When the link heals,
    the message arrives intact."""
    rows = {r["rank"]: r for r in _lose_connection_requests(tmp_path, "work_dialing.py", 1, 5, healed="healed")}
    for r in rows.values():
        assert r["kind"] == "no error" and r["ok"], r
        assert r["calls"] > 50 and r["longest_s"] < 0.25, r
    # describe() says what each side waits for: rank 0 dials rank 1's address, whose host has not
    # answered for seconds; rank 1 waits for rank 0 to connect.
    peer1 = next(line for line in rows[0]["describe"].splitlines() if line.strip().startswith("peer 1:"))
    assert "connecting over tcp, opening socket 1 of" in peer1 and "its host has not answered a connect for" in peer1, peer1
    peer0 = next(line for line in rows[1]["describe"].splitlines() if line.strip().startswith("peer 0:"))
    assert "waiting for it to connect" in peer0, peer0


def test_survivors_agree_while_connection_requests_are_lost(tmp_path):
    """2 hosts x 2 ranks; the last rank exits, and for the first 2.5 s of the survivors' shrink
    every connection request between the hosts is lost. The agreement opens a connection per
    request; a request whose SYN went unanswered must not make a live rank a suspect before the
    dead-link bound (a lost SYN is retried after 1 s, then 3 s: a 0.5 s connect window left the
    rank across the link out of the new communicator). All three survivors end up in it."""
    rows = _lose_connection_requests(tmp_path, "work_lossy_shrink.py", 2, 2.5)
    assert sorted(r["rank"] for r in rows) == [0, 1, 2], rows
    for r in rows:
        assert r["kind"] == "no error" and r["size"] == 3 and r["sum"] == 3.0, json.dumps(rows)


def _lose_connection_requests(tmp_path, worker, per_host, lost_s, healed=None):
    """Runs a testbed worker on 2 hosts x per_host ranks ($WORK_FLAG names its flag file). Once
    every rank created $WORK_FLAG.rank<r>, every new connection request between the hosts gets
    lost, the flag says "go", and lost_s later the link heals (and the flag says `healed`, if
    given). Returns the ranks' RESULT rows."""
    flag = str(tmp_path / "flag")
    with netbed.Testbed(clusters=1, hosts=2, intra_gbit=0.5) as bed:
        procs = launch.start(bed, per_host, [os.path.join(TESTBED, worker)],
                             env={"UCCL_TIMEOUT_S": "60", "UCCL_PROBE": "off", "WORK_FLAG": flag})
        deadline = time.time() + 60
        while len(glob.glob(flag + ".rank*")) < 2 * per_host and time.time() < deadline:
            time.sleep(0.02)
        bed.lossy(100, syn_only=True)
        open(flag, "w").write("go")
        time.sleep(lost_s)
        bed.lossy(0)
        if healed:
            open(flag + ".tmp", "w").write(healed)
            os.replace(flag + ".tmp", flag)
        return launch.wait(procs, timeout=120)
