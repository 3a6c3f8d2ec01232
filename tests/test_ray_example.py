"""examples/ray_pipeline.py (Alpa-style pipeline + data parallelism over uccl on Ray) end to end:
its own local Ray cluster in a subprocess, checked by the example against a single-process run."""
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("ray")
pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.timeout(600)
def test_pipeline_example_matches_single_process(tmp_path):
    temp = f"/tmp/ray_embed_ex_{os.getpid()}"  # short: Ray's unix sockets live under it
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_TMPDIR=temp, UCCL_TIMEOUT_S="60")
    try:
        p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "ray_pipeline.py"), "--steps", "3"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    assert "matches the single-process run" in p.stdout
