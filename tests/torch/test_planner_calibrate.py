"""The planner's calibration run (uccl.planner.calibrate) under torchrun on 4 local ranks: the
document has a time for every partition, operation and size, compute per (t, b), a rate per link
level, and the
Calibration built from it prices the planner's operations (no quota here: plain speeds)."""
import json
import os
import subprocess
import sys

import pytest
import uccl

import torch_dist_util as U

if not uccl.build_info().get("torch"):
    pytest.skip("uccl built without the torch backend", allow_module_level=True)


def test_calibrate_under_torchrun(tmp_path):
    from uccl.planner import calibration as cb
    placement = ["h0", "h0", "h1", "h1"]
    parts = cb.spec_partitions(4, [1, 2], [1, 2, 4], ("holmes",), placement, {"h0": "c0", "h1": "c0"})
    spec = {"model": {"hidden": 32, "heads": 4, "seq": 16, "vocab": 64}, "tps": [1, 2], "micro_batches": [1, 2],
            "sizes": [256, 65536], "reps": 1, "min_s": 0.05, "kind_of_rank": ["cpu"] * 4, "partitions": parts,
            "links": cb.link_items(placement, {"h0": "c0", "h1": "c0"}), "link_bytes": 1 << 20,
            "tp_in_place": [2], "p2p_in_place": True}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=4", f"--master-port={U.free_port()}",
           "-m", "uccl.planner.calibrate", "--spec", str(path)]
    env = dict(os.environ, OMP_NUM_THREADS="1", UCCL_TIMEOUT_S="120")
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stderr[-5000:]
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, p.stdout[-3000:]
    doc = json.loads(lines[0][len("RESULT "):])
    for part in parts:
        ops = ["p2p", "p2p_in_place"] if part["kind"] == "p2p" else ["all_gather", "reduce_scatter", "all_reduce"]
        for op in ops:
            got = doc["comm"][part["shape"]][op]
            assert sorted(got) == ["256", "65536"] and all(v > 0 for v in got.values()), (part, op, got)
    tm = doc["compute"]["cpu"]
    assert set(tm["block"]) == {"1,1", "1,2", "2,1", "2,2"} and all(v > 0 for v in tm["block"].values())
    assert set(tm["head"]) == set(tm["block"]) and tm["adam_per_param"] > 0
    # the t = 2 blocks also timed with their real TP groups ([0, 1] and [2, 3])
    assert set(tm["block_tp"]) == {"2,1", "2,2"} and all(v > 0 for v in tm["block_tp"].values())
    # uccl-perf's sendrecv between one pair per level (all four ranks share this machine: a rate > 0)
    assert sorted(doc["links"]) == ["host", "nic:c0"] and all(g > 0 for g in doc["links"].values()), doc["links"]
    cal = cb.Calibration(doc)
    shape = cb.group_shape(placement, {"h0": "c0", "h1": "c0"}, [0, 1])
    assert cal.comm_time("all_gather", 1000, shape, concurrent=2) > 0
