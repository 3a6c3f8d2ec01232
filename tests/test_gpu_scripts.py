"""The GPU run's own scripts, checked here so that they work the day a GPU session runs them.

A session with a GPU has 15 minutes of device time for the whole of tests/gpu/run.sh; a script
that broke since the last GPU session costs that session its run. So, on this machine:
  * tests/gpu/smoke.py in its "host" mode (no torch, host buffers: the variant run.sh runs first
    to tell a crash of uccl's set-up from one that needs CUDA) runs two ranks to "done, 0 wrong";
  * run.sh parses (bash -n) and, where there is no NVIDIA GPU, says SKIPPED and exits 0.
"""
import os
import shutil
import subprocess
import sys

import pytest

from harness import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = os.path.join(ROOT, "tests", "gpu", "smoke.py")
RUN = os.path.join(ROOT, "tests", "gpu", "run.sh")


def test_smoke_host_mode_runs_two_ranks(tmp_path):
    port = str(free_port())
    env = dict(os.environ, UCCL_DEBUG="NONE")
    procs = [subprocess.Popen([sys.executable, "-X", "faulthandler", SMOKE, str(r), "2", port, "host"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=120)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r} exited with {p.returncode}:\n{out}"
        assert "done, 0 wrong" in out, f"rank {r}:\n{out}"
        assert "import torch" not in out, f"rank {r} imported torch in host mode:\n{out}"
        assert "all_reduce numpy: ok" in out, f"rank {r}:\n{out}"


def test_run_sh_parses_and_skips_without_a_gpu(tmp_path):
    subprocess.run(["bash", "-n", RUN], check=True)
    if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0:
        pytest.skip("this machine has an NVIDIA GPU: run.sh would build and run the GPU tests")
    r = subprocess.run(["bash", RUN, str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "GPU tests SKIPPED" in r.stdout, r.stdout
