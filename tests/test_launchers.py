"""README's "Launchers": examples/launchers/hello.py under torchrun, mpirun, plain environment
variables, Slurm's variables (a stand-in for srun: no Slurm here) and Ray."""
import os
import shutil
import subprocess
import sys

import pytest

from harness import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELLO = os.path.join(ROOT, "examples", "launchers", "hello.py")
WORLD = 4


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("UCCL_", "RANK", "WORLD_SIZE", "MASTER_", "OMPI_", "SLURM_", "RAY_"))}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def check(outs):
    text = "".join(outs)
    for r in range(WORLD):
        assert f"HELLO rank {r}/{WORLD}: all_reduce ok" in text, text[-3000:]


def run(cmd, env, timeout=300, cwd=ROOT):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert p.returncode == 0, f"{cmd} -> {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


def run_each_rank(env_of):
    procs = [subprocess.Popen([sys.executable, HELLO], env=env_of(r), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT) for r in range(WORLD)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0, out + err[-3000:]
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


@pytest.mark.timeout(600)
def test_torchrun():
    pytest.importorskip("torch")
    out = run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD),
               "--master-port", str(free_port()), HELLO], clean_env())
    check([out])


@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")
def test_mpirun():
    pytest.importorskip("mpi4py")
    env = clean_env(OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_rmaps_base_oversubscribe="1")
    check([run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(WORLD), sys.executable, HELLO], env)])


@pytest.mark.timeout(600)
def test_plain_environment_variables():
    port = free_port()
    check(run_each_rank(lambda r: clean_env(RANK=r, WORLD_SIZE=WORLD, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)))


@pytest.mark.timeout(600)
def test_slurm_variables_as_srun_sets_them():
    """What srun gives each task (SLURM_PROCID, SLURM_NTASKS) plus hello.sbatch's MASTER_*."""
    run(["bash", "-n", os.path.join(ROOT, "examples", "launchers", "hello.sbatch")], clean_env())
    port = free_port()
    check(run_each_rank(lambda r: clean_env(SLURM_PROCID=r, SLURM_NTASKS=WORLD, SLURM_LOCALID=r,
                                            MASTER_ADDR="127.0.0.1", MASTER_PORT=port)))


@pytest.mark.timeout(600)
def test_ray(tmp_path):
    """Run outside the checkout: Ray workers put the driver's working directory on sys.path, where
    the source tree's uccl (without the compiled _core) would shadow the installed one."""
    pytest.importorskip("ray")
    temp = f"/tmp/ray_embed_l_{os.getpid()}"
    try:
        out = run([sys.executable, os.path.join(ROOT, "examples", "launchers", "ray_hello.py"), "--actors", str(WORLD)],
                  clean_env(RAY_TMPDIR=temp), timeout=540, cwd=tmp_path)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    check([out])
