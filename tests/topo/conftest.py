"""Fixtures for the topology tests.

test_loopback.py needs nothing special: ranks are processes on this machine whose UCCL_HOST_ID
and UCCL_CLUSTER make them look like several hosts in several clusters (over loopback).
test_testbed.py needs root and `ip netns`: it builds the emulated network of
benchmarks/testbed (skipped only when `ip netns add` fails).
"""
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTBED = os.path.join(REPO, "benchmarks", "testbed")
sys.path.insert(0, TESTBED)

import launch  # noqa: E402
import netbed  # noqa: E402


@pytest.fixture(scope="session")
def bed():
    if not netbed.netns_available():
        pytest.skip("needs root and `ip netns add` (network namespaces)")
    with netbed.Testbed(clusters=2, hosts=2, intra_gbit=4, inter_gbit=0.5) as b:
        yield b


@pytest.fixture(scope="session")
def topo_file(bed, tmp_path_factory):
    return bed.topology_file(str(tmp_path_factory.mktemp("topo") / "topo.json"), ranks_per_host=2)
