"""benchmarks/compare.py end to end (small sizes): uccl, Gloo and Open MPI in one table, with
uccl timed through its Python API (the default) and through the C++ loop."""
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")
@pytest.mark.parametrize("loop", ["python", "cpp"])
def test_compare_prints_every_library_and_the_ratios(tmp_path, loop):
    pytest.importorskip("mpi4py")
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_", "PMIX_"))}
    env.update(UCCL_DEBUG="NONE", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    out = tmp_path / "cmp"
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable,
           os.path.join(ROOT, "benchmarks", "compare.py"), "all_reduce", "--sizes", "8,64K", "-n", "3",
           "--small-iters", "20", "-R", "2", "--uccl-loop", loop, "--out", str(out)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert f"uccl loop {loop}" in p.stdout and "uccl/gloo" in p.stdout and "uccl/mpi" in p.stdout
    result = json.loads((tmp_path / "cmp.json").read_text())
    assert result["uccl_loop"] == loop
    rows = result["rows"]
    assert [r["size"] for r in rows] == [8, 65536]
    assert all(r["libs"][lib]["time_us"] > 0 for r in rows for lib in ("uccl", "gloo", "mpi"))
    assert all(r["uccl/mpi"] > 0 and r["uccl/gloo"] > 0 for r in rows)
