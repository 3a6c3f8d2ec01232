"""Rails on the testbed (root + ip netns): two hosts with two NICs each on two separate networks
shaped to 0.5 Gbit/s, two ranks per host. With UCCL_SOCKET_IFNAME="=eth0;=eth1" each local rank
binds to its rail's NIC (describe() says so) and the two pairs together move about twice what
they move when both ranks of a host share eth0. One rank per host listening on both NICs stripes
its connection's sockets over the two subnets and alone reaches about twice one NIC's rate. Two
ranks per host given both NICs and no list take a rail each by local rank. A second NIC slower
than it reports (shaped to half, both say 10 Gbit/s) gets fewer of a striped message's chunks
(UCCL_TCP_STRIPE=adaptive), so the pair moves more than equal halves over both would."""
import pytest

from conftest import TESTBED, netbed  # noqa: F401  (conftest puts the testbed on sys.path)


def test_two_rails_double_one_nic():
    if not netbed.netns_available():
        pytest.skip("needs root and `ip netns add` (network namespaces)")
    import rails_bench
    rows = rails_bench.run(0.5, 16, 2, cases=rails_bench.CASES[1:3])
    shared, rails = rows
    assert "rail NIC" not in " ".join(shared["listen"])
    assert "rail NIC eth1: UCCL_SOCKET_IFNAME entry 1 of 2 for local rank 1" in rails["listen"][1]
    assert "10.211.1.1" in rails["listen"][1] and "10.210.1.1" in rails["listen"][0]
    assert shared["gbit"] < 0.6, shared  # both pairs through one 0.5 Gbit/s NIC
    assert rails["gbit"] > 1.5 * shared["gbit"], (shared, rails)


def test_one_rank_stripes_over_two_nics():
    if not netbed.netns_available():
        pytest.skip("needs root and `ip netns add` (network namespaces)")
    import rails_bench
    one, striped = rails_bench.run(0.5, 16, 2, cases=[rails_bench.CASES[0], rails_bench.CASES[3]])
    assert one["striped"] == [], one
    assert len(striped["striped"]) == 1, striped
    assert "striped over 10.210.1.0/24" in striped["striped"][0] and "10.211.1.0/24" in striped["striped"][0], striped
    assert one["gbit"] < 0.6, one
    assert striped["gbit"] > 1.5 * one["gbit"], (one, striped)


def test_rails_by_local_rank_without_a_list():
    if not netbed.netns_available():
        pytest.skip("needs root and `ip netns add` (network namespaces)")
    import rails_bench
    shared, rails = rails_bench.run(0.5, 16, 2, cases=[rails_bench.CASES[1], rails_bench.CASES[4]])
    assert "rail NIC eth0: rail 0 of 2 NICs for local rank 0 of 2" in rails["listen"][0], rails
    assert "rail NIC eth1: rail 1 of 2 NICs for local rank 1 of 2" in rails["listen"][1], rails
    assert rails["gbit"] > 1.5 * shared["gbit"], (shared, rails)


def test_rails_from_the_topology_file(tmp_path):
    """The file's `rails` win over the local-rank order (reversed here: local rank 0 takes eth1)."""
    if not netbed.netns_available():
        pytest.skip("needs root and `ip netns add` (network namespaces)")
    import rails_bench
    topo = tmp_path / "rails.yaml"
    topo.write_text("clusters:\n  - name: c0\n    hosts:\n"
                    "      - {addresses: [10.210.1.1], rails: [eth1, eth0]}\n"
                    "      - {addresses: [10.210.1.2], rails: [eth1, eth0]}\n")
    case = ("2 ranks, rails from the topology file", 2, "=eth0,eth1", {"UCCL_TOPO_FILE": str(topo)})
    (row,) = rails_bench.run(0.5, 16, 2, cases=[case])
    assert "10.211.1.1" in row["listen"][0] and "topology file rail 0 of 2 for local rank 0" in row["listen"][0], row
    assert "10.210.1.1" in row["listen"][1] and "topology file rail 1 of 2 for local rank 1" in row["listen"][1], row
    assert row["gbit"] > 0.75, row  # both rails busy (one NIC gives 0.48)


def _declared_missing_rail(tmp_path, extra_env):
    import os
    import socket
    import subprocess
    import sys
    topo = tmp_path / "bad.yaml"
    topo.write_text(f"clusters:\n  - name: c0\n    hosts:\n      - {{name: {socket.gethostname()}, rails: [nosuchif0]}}\n")
    code = ("import uccl\n"
            "try:\n"
            "    c = uccl.Communicator(0, 1, uccl.TcpStore('127.0.0.1', 0, is_server=True))\n"
            "    print('describe:', c.describe().splitlines()[0])\n"
            "except uccl.InvalidArgument as e:\n"
            "    print('refused:', e)\n")
    env = dict(os.environ, UCCL_TOPO_FILE=str(topo), LOCAL_RANK="0", **extra_env)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_a_declared_rail_that_is_not_there_falls_back_to_every_nic(tmp_path):
    """A missing rail NIC is not fatal: the rank listens on every NIC with a link and says why."""
    out = _declared_missing_rail(tmp_path, {})
    assert "describe:" in out.stdout, (out.stdout, out.stderr)
    assert "rail nosuchif0 of local rank 0 is not among the interfaces" in out.stdout, out.stdout
    assert "every NIC with a link instead" in out.stdout and "every NIC with a link instead" in out.stderr, out


def test_a_declared_rail_that_is_not_there_is_refused_when_strict(tmp_path):
    out = _declared_missing_rail(tmp_path, {"UCCL_RAIL_NICS": "strict"}).stdout
    assert "refused:" in out and "rail nosuchif0 of local rank 0 is not among the interfaces" in out, out
    assert "UCCL_RAIL_NICS=strict" in out, out


def test_adaptive_striping_gives_a_slow_nic_less():
    """eth1 at 0.25 Gbit/s beside eth0's 0.5: equal halves (static) take as long as 2 x 0.25; the
    adaptive cut approaches 0.75 (measured 0.70 vs 0.48, benchmarks/RESULTS.md)."""
    if not netbed.netns_available():
        pytest.skip("needs root and `ip netns add` (network namespaces)")
    import rails_bench
    one, static, adaptive = rails_bench.run(0.5, 16, 2, cases=rails_bench.SLOW_RAIL_CASES, slow_rail=0.5)
    assert static["eth1_gbit"] == 0.25 and len(adaptive["striped"]) == 1, adaptive
    assert static["gbit"] < 0.55, static  # the slow NIC sets the time of equal halves
    assert adaptive["gbit"] > 1.2 * static["gbit"], (static, adaptive)
