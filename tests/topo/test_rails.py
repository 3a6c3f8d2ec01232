"""Rails on the testbed (root + ip netns): two hosts with two NICs each on two separate networks
shaped to 0.5 Gbit/s, two ranks per host. With UCCL_SOCKET_IFNAME="=eth0;=eth1" each local rank
binds to its rail's NIC (describe() says so) and the two pairs together move about twice what
they move when both ranks of a host share eth0. One rank per host listening on both NICs stripes
its connection's sockets over the two subnets and alone reaches about twice one NIC's rate. Two
ranks per host given both NICs and no list take a rail each by local rank."""
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
