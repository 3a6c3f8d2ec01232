"""A slice of PyTorch's own distributed test suite (torch/testing/_internal/distributed/
distributed_test.py) run against uccl through scripts/torch_dist_suite.py, so that the script
keeps working and the conformance fixes it found stay fixed. The whole suite is a separate
run (benchmarks/RESULTS.md, "PyTorch's own distributed tests"): it takes 15-30 minutes here.

Three runs: under uccl's own name (its gating skips the gloo- and mpi-only tests), and under
gloo's and mpi's names with every group they ask for made by uccl (UCCL_SUITE_AS), which
reaches the tests those names gate: sparse all_reduce, CPU all_to_all, get_future, and Gloo's
monitored_barrier tests (torch's monitored_barrier goes to uccl's under that run)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import uccl

if not uccl.build_info().get("torch"):  # the build says so; never guess from imports
    pytest.skip("uccl built without the torch backend", allow_module_level=True)
pytest.importorskip("expecttest", reason="torch's test utilities need expecttest (scripts/setup.sh installs it)")

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "scripts" / "torch_dist_suite.py"

RUNS = {
    # (test_batch_isend_irecv_op_list_err was listed here too: torch skips it but for NCCL, which
    # the old -k selection's count of its variants hid; batch_isend_irecv runs under gloo's name.)
    "uccl": ["test_all_reduce_sum", "test_all_gather_coalesced_simple", "test_send_recv_any_source",
             "test_ddp_logging_data_cpu"],
    "gloo": ["test_sparse_all_reduce_sum", "test_batch_isend_irecv_gloo", "test_all_reduce_coalesced_max",
             "test_get_future", "test_monitored_barrier_gloo_subgroup", "test_monitored_barrier_gloo_rank_0_timeout"],
    "mpi": ["test_all_to_all_single_unequal_split", "test_all_to_all_full_group"],
}


@pytest.mark.parametrize("name", list(RUNS))
def test_pytorch_distributed_suite_slice(name, tmp_path):
    env = dict(os.environ, WORLD_SIZE="3", TEMP_DIR=str(tmp_path), PYTHONPATH=str(ROOT / "scripts"))
    env.pop("BACKEND", None)
    if name != "uccl":
        env["UCCL_SUITE_AS"] = name
    # By node id: a -k of these names also takes their variants (test_all_reduce_sum_async,
    # _complex, ...; 22 tests instead of 13, each ~8 s of three ranks importing torch's suite).
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout", "300",
           *(f"{SUITE}::TestDistBackendWithSpawn::{t}" for t in RUNS[name])]
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    tail = r.stdout[-3000:] + r.stderr[-2000:]
    assert r.returncode == 0, tail
    m = re.search(r"(\d+) passed", r.stdout)
    # Every named test ran and passed (a skip would hide a regression).
    assert m and int(m.group(1)) == len(RUNS[name]), tail
    assert "failed" not in r.stdout.splitlines()[-1], tail
