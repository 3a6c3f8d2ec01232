"""A short uccl.parallel run under torchrun (4 ranks, TP 2 x PP 2 with unequal stages, then
DP 2 x PP 2 with ZeRO): the RESULT line, per-group traffic and a Chrome trace of one step."""
import json
import os
import subprocess
import sys

import pytest
import uccl

import torch_dist_util as U

if not uccl.build_info().get("torch"):
    pytest.skip("uccl built without the torch backend", allow_module_level=True)


def torchrun(tmp_path, *args):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=4", f"--master-port={U.free_port()}",
           "-m", "uccl.parallel.train", "--layers", "3", "--hidden", "32", "--seq", "16", "--vocab", "128",
           "--steps", "2", *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", UCCL_TIMEOUT_S="120")
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, f"{' '.join(cmd)}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-5000:]}"
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, p.stdout[-3000:]
    return json.loads(lines[0][len("RESULT "):]), p.stdout


def test_torchrun_tp_pp_trace(tmp_path):
    trace = tmp_path / "step.json"
    r, out = torchrun(tmp_path, "--tp", "2", "--pp", "2", "--parts", "2,1", "--trace", str(trace))
    assert (r["tp"], r["dp"], r["pp"], r["parts"]) == (2, 1, 2, [2, 1])
    assert r["tokens_per_s"] > 0 and r["final_loss"] > 0
    assert "[tp group of rank 0]" in out and "path to rank 1" in out  # describe() logged
    assert r["traffic_per_step"]["tp"]["bytes_sent"].get("shm", 0) > 0
    assert r["traffic_per_step"]["pp"]["bytes_sent_by_level"].get("host", 0) > 0
    assert r["comm_s"]["tp"] > 0 and r["comm_s"]["pp"] > 0
    # per timed step: its wall-clock span over all ranks (covers the slowest rank's step time)
    # and each category's max over ranks
    assert len(r["wall_all"]) == len(r["comm_s_all"]) == len(r["step_s_all"]) == 2
    for (t0, t1), st, cm in zip(r["wall_all"], r["step_s_all"], r["comm_s_all"]):
        assert t1 - t0 >= st * 0.999 and cm["tp"] > 0 and cm["pp"] > 0
    assert r["wall_all"][0][1] <= r["wall_all"][1][1]
    events = json.loads(trace.read_text())["traceEvents"]
    cats = {e.get("cat") for e in events}
    assert {"tp", "pp", "forward", "backward"} <= cats, cats
    assert {e["pid"] for e in events if e.get("ph") == "X"} == {0, 1, 2, 3}


def test_torchrun_zero_dp(tmp_path):
    r, _ = torchrun(tmp_path, "--pp", "2", "--layout", "naive", "--parts", "adapt")
    assert (r["tp"], r["dp"], r["pp"]) == (1, 2, 2) and sum(r["parts"]) == 3
    assert r["traffic_per_step"]["dp"]["bytes_sent"].get("shm", 0) > 0
    assert r["comm_s"]["dp"] > 0
