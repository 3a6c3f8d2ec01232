"""Measured link rates (core/link_probe.h): probed, agreed on, shown, declared rates winning.

Loopback (no root): 4 processes as 2 "hosts" (UCCL_HOST_ID), 2 ranks each, so two levels are
present and UCCL_PROBE=auto measures both. Testbed (root + ip netns): 2 clusters x 2 hosts, one
rank each, no topology file: the inter-cluster rate decides hier (0.15 Gbit/s) vs ring (0.5),
which the reported rates (veth 10 Gbit/s, uplink unknown) cannot tell apart.
"""
import json
import os
import re
import subprocess
import sys
import uuid

import pytest

from conftest import TESTBED, netbed
from test_loopback import run_local

PROBE = [os.path.join(TESTBED, "work_probe.py"), "1"]


def _layout():
    tag = uuid.uuid4().hex[:8]  # host ids of their own: the probe cache is keyed by them
    return [(f"p{tag}a", "c0")] * 2 + [(f"p{tag}b", "c0")] * 2


def _gbit(links, what):
    m = re.search(what + r" ([0-9.e+]+) Gbit/s \(([a-z ]+)\)", links)
    return float(m.group(1)), m.group(2)


def _levels(probe_line):
    return re.search(r"levels ([a-z_]+(?:,[a-z_]+)*)", probe_line).group(1)


def test_probe_auto_measures_both_levels_and_ranks_agree():
    res = run_local(_layout(), PROBE, {"UCCL_PROBE": "auto", "UCCL_PROBE_CACHE_S": "0"}, timeout=120)
    assert len(res) == 4
    # Every rank uses the same figures (published once, read by all) and so the same algorithm.
    assert len({r["links"] for r in res}) == 1, [r["links"] for r in res]
    assert len({r["chosen"] for r in res}) == 1
    host, hsrc = _gbit(res[0]["links"], "host")
    nic, nsrc = _gbit(res[0]["links"], "host nic")
    assert (hsrc, nsrc) == ("measured", "measured")
    assert host > 0.05 and nic > 0.05  # Gbit/s: anything that moved 4 MiB through the transport
    assert _levels(res[0]["probe"]) == "host,cluster"
    assert "probe: UCCL_PROBE=auto" in res[0]["describe"]


def test_probe_off_keeps_reported_rates():
    res = run_local(_layout(), PROBE, {"UCCL_PROBE": "off"}, timeout=120)
    assert "measured" not in res[0]["links"]
    assert res[0]["probe"].startswith("off")


def test_declared_rate_wins_and_only_the_rest_is_probed(tmp_path):
    layout = _layout()
    doc = {"clusters": [{"name": "c0", "nic_gbps": 3, "hosts": [{"name": layout[0][0]}, {"name": layout[2][0]}]}]}
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(doc))
    res = run_local(layout, PROBE, {"UCCL_PROBE": "auto", "UCCL_PROBE_CACHE_S": "0", "UCCL_TOPO_FILE": str(path)},
                    timeout=120)
    assert _gbit(res[0]["links"], "host nic") == (3.0, "declared")
    assert _gbit(res[0]["links"], "host")[1] == "measured"
    assert _levels(res[0]["probe"]) == "host"


def test_probe_cache_reused_within_expiry():
    layout = _layout()
    env = {"UCCL_PROBE": "auto", "UCCL_PROBE_CACHE_S": "600"}
    first = run_local(layout, PROBE, env, timeout=120)
    second = run_local(layout, PROBE, env, timeout=120)
    assert "from the cache" not in first[0]["probe"]
    assert "(2 from the cache)" in second[0]["probe"]
    assert second[0]["links"] == first[0]["links"]


def test_probe_cache_is_per_transport():
    """The same hosts over another transport are another link: forcing tcp after a run that used
    shm inside each host measures the host level again (the cluster level was tcp both times)."""
    layout = _layout()
    env = {"UCCL_PROBE": "auto", "UCCL_PROBE_CACHE_S": "600"}
    first = run_local(layout, PROBE, env, timeout=120)
    forced = run_local(layout, PROBE, dict(env, UCCL_TRANSPORT="tcp"), timeout=120)
    again = run_local(layout, PROBE, dict(env, UCCL_TRANSPORT="tcp"), timeout=120)
    assert "from the cache" not in first[0]["probe"]
    assert "(1 from the cache)" in forced[0]["probe"], forced[0]["probe"]
    assert "(2 from the cache)" in again[0]["probe"], again[0]["probe"]


def test_bad_probe_setting_is_refused():
    code = ("import uccl\n"
            "try:\n    uccl.init(rank=0, world_size=1)\nexcept uccl.InvalidArgument as e:\n"
            "    print('refused', e)\n")
    env = dict(os.environ, UCCL_PROBE="sometimes", MASTER_ADDR="127.0.0.1", MASTER_PORT="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "refused" in out.stdout and "UCCL_PROBE" in out.stdout, out.stdout + out.stderr


def test_choice_follows_shaped_uplink_on_testbed():
    if not netbed.netns_available():
        pytest.skip("needs root and `ip netns add` (network namespaces)")
    sys.path.insert(0, TESTBED)
    import probe_flip
    slow = probe_flip.run_case(0.5, 0.15, 16, "auto", False)
    fast = probe_flip.run_case(0.5, 0.5, 16, "auto", False)
    up_slow, src = _gbit(slow[0]["links"], "cluster uplink")
    assert src == "measured" and 0.08 < up_slow < 0.3, slow[0]["links"]
    up_fast, _ = _gbit(fast[0]["links"], "cluster uplink")
    assert 0.3 < up_fast < 0.8, fast[0]["links"]
    assert slow[0]["chosen"] == "hier" and fast[0]["chosen"] == "ring", (slow[0], fast[0])
