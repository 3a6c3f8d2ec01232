"""Rails on the testbed (root + ip netns): two hosts with two NICs each on two separate networks
shaped to 0.5 Gbit/s, two ranks per host. With UCCL_SOCKET_IFNAME="=eth0;=eth1" each local rank
binds to its rail's NIC (describe() says so) and the two pairs together move about twice what
they move when both ranks of a host share eth0."""
import pytest

from conftest import TESTBED, netbed  # noqa: F401  (conftest puts the testbed on sys.path)


def test_two_rails_double_one_nic():
    if not netbed.netns_available():
        pytest.skip("needs root and `ip netns add` (network namespaces)")
    import rails_bench
    rows = rails_bench.run(0.5, 16, 2, cases=rails_bench.CASES[1:])
    shared, rails = rows
    assert "rail NIC" not in " ".join(shared["listen"])
    assert "rail NIC eth1: UCCL_SOCKET_IFNAME entry 1 of 2 for local rank 1" in rails["listen"][1]
    assert "10.211.1.1" in rails["listen"][1] and "10.210.1.1" in rails["listen"][0]
    assert shared["gbit"] < 0.6, shared  # both pairs through one 0.5 Gbit/s NIC
    assert rails["gbit"] > 1.5 * shared["gbit"], (shared, rails)
