"""The planner wired to uccl.cost (the C++ cost model): the testbed-shaped cluster file and a
paper-scale preset give plans whose groups name the algorithm uccl would pick."""
import json
import subprocess
import sys
import tempfile

import pytest

cost = pytest.importorskip("uccl.cost", reason="uccl.cost not in this build")

CLUSTER = {
    "topology": {"inter_cluster_gbps": 0.05, "clusters": [
        {"name": f"c{c}", "fabric": f"c{c}-fabric", "nic_gbps": 1.0, "uplink_gbps": 0.05,
         "hosts": [{"name": f"c{c}h{h}", "nics": [{"name": "eth0", "kind": "tcp", "fabric": f"c{c}-fabric",
                                                   "gbps": 1.0}]} for h in range(2)]} for c in range(2)]},
    "devices": {"fast": {"flops": 2e9, "memory_gib": 4}, "slow": {"flops": 1e9, "memory_gib": 4}},
    "hosts": {"c0": {"device": "fast", "count": 2}, "c1": {"device": "slow", "count": 2}},
    "model": {"layers": 8, "hidden": 256, "heads": 4, "seq": 32, "vocab": 512, "global_batch": 16},
}


def run(*args):
    # cwd outside the checkout: its uccl/ (no compiled _core) must not shadow the installed one
    p = subprocess.run([sys.executable, "-m", "uccl.planner", *args], capture_output=True, text=True, timeout=300,
                       cwd=tempfile.gettempdir())
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_testbed_cluster_plans(tmp_path):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(CLUSTER))
    out = json.loads(run("--cluster", str(path), "--json", "--top", "4"))
    plans = out["plans"]
    assert plans and out["world"] == 8
    times = [p["predicted_s"] for p in plans]
    assert times == sorted(times)
    best = plans[0]
    # A slow link between clusters: the best plan keeps DP inside clusters or avoids DP across.
    if best["pp"] > 1 and best["dp"] > 1:
        assert best["layout"] == "holmes", best
        assert best["groups"]["dp"]["where"] != "across clusters"
        fast = best["order"].index(0)  # pipeline position 0 = cluster c0, the fast devices
        assert best["parts"][fast] >= best["parts"][1 - fast], best
    text = run("--cluster", str(path), "--top", "2")
    assert "groups:" in text and "s/iter" in text


def test_paper_scale_preset():
    out = json.loads(run("--preset", "a100:1024", "--model-preset", "gpt-145b", "--json", "--top", "3"))
    assert out["world"] == 1024 and len(out["plans"]) == 3
    for p in out["plans"]:
        assert p["tp"] * p["pp"] * p["dp"] == 1024 and p["memory_gib"] <= 80
        assert p["groups"]["tp"]["where"] in ("inside a host", "-")


def test_calibration_file_prices_cpu_bound_communication(tmp_path):
    """--calibration: measured block times replace FLOP/s and every operation costs at least
    its group shape's calibrated latency (10 ms here, far above the links' microseconds)."""
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(CLUSTER))
    shapes = ("n2h1c1", "n2h2c1", "n2h2c2", "n4h2c1", "n4h4c2", "n8h4c2")
    ops = ("all_gather", "reduce_scatter", "all_reduce", "p2p")
    timings = {"block": {f"{t},{b}": 0.02 * b / t for t in (1, 2) for b in (1, 2, 4, 8)},
               "head": {f"{t},{b}": 0.005 * b / t for t in (1, 2) for b in (1, 2, 4, 8)}, "adam_per_param": 2e-8}
    cal = {"quota": 0.0, "compute": {"fast": timings, "slow": timings},
           "comm": {s: {op: {"256": 0.01, "1048576": 0.05} for op in ops} for s in shapes}}
    cal_path = tmp_path / "cal.json"
    cal_path.write_text(json.dumps(cal))
    plain = json.loads(run("--cluster", str(path), "--json", "--top", "50"))["plans"]
    out = json.loads(run("--cluster", str(path), "--json", "--top", "50", "--calibration", str(cal_path)))["plans"]
    # without the calibration the links' rates price a message in microseconds
    assert any(p["pp"] > 1 and p["breakdown_s"]["pp"] < 2 * (p["pp"] - 1) * 0.01 for p in plain)
    assert out
    for p in out:
        # the world's loss all_reduce alone costs >= 10 ms; a pipeline's messages 10 ms each
        assert p["predicted_s"] >= 0.01
        if p["pp"] > 1:
            assert p["breakdown_s"]["pp"] >= 2 * (p["pp"] - 1) * 0.01 - 1e-9
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    p = subprocess.run([sys.executable, "-m", "uccl.planner", "--cluster", str(path), "--calibration", str(bad)],
                       capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir())
    assert p.returncode == 2 and "calibration" in p.stderr


def test_calibration_spec_for_a_cluster(tmp_path):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(CLUSTER))
    out = tmp_path / "spec.json"
    assert "uccl.planner.calibrate" in run("--cluster", str(path), "--calibration-spec", str(out))
    spec = json.loads(out.read_text())
    assert spec["tps"] == [1, 2] and spec["kind_of_rank"] == ["fast"] * 4 + ["slow"] * 4
    keys = {(p["kind"], p["shape"]) for p in spec["partitions"]}
    # the world, TP pairs inside a host (4 at once), a 2-deep pipeline's 4 pairs across clusters
    assert {("coll", "n8h4c2x1"), ("coll", "n2h1c1x4"), ("p2p", "n2h2c2x4")} <= keys, keys
