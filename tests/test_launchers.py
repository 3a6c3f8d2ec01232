"""README's "Launchers": examples/launchers/hello.py under torchrun, mpirun, plain environment
variables, Slurm (srun and sbatch on a one-node Slurm cluster that scripts/slurm_local.sh starts,
and Slurm's variables set by hand) and Ray."""
import os
import shutil
import socket
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


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node Slurm cluster of this test run's own (directory, ports); its SLURM_CONF."""
    missing = [c for c in ("slurmctld", "slurmd", "srun", "sbatch", "munged") if shutil.which(c) is None]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} missing; scripts/setup.sh installs it)")
    if os.geteuid() != 0:
        pytest.skip("starting slurmctld/slurmd needs root")
    env = clean_env(UCCL_SLURM_DIR=str(tmp_path_factory.mktemp("slurm")),
                    UCCL_SLURMCTLD_PORT=free_port(), UCCL_SLURMD_PORT=free_port())
    script = os.path.join(ROOT, "scripts", "slurm_local.sh")
    out = run(["bash", script, "start"], env, timeout=120)
    conf = out.strip().rpartition("SLURM_CONF=")[2]
    assert os.path.isfile(conf), out
    try:
        yield conf
    finally:
        subprocess.run(["bash", script, "stop"], env=env, timeout=60)


@pytest.mark.timeout(600)
def test_srun(slurm):
    """srun starts the tasks (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID are Slurm's own)."""
    out = run(["srun", "-n", str(WORLD), "--time=5", sys.executable, HELLO],
              clean_env(SLURM_CONF=slurm, MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port()))
    check([out])


@pytest.mark.timeout(600)
def test_sbatch(slurm, tmp_path):
    """The README's batch script as it is, on one node instead of two (command-line options win over
    its #SBATCH lines); --wait returns the job's exit code."""
    log = tmp_path / "hello.out"
    env = clean_env(SLURM_CONF=slurm, MASTER_PORT=free_port(), PATH=os.path.dirname(sys.executable) + os.pathsep +
                    os.environ.get("PATH", ""))
    try:  # the script takes the first node's name as MASTER_ADDR: only where that name resolves
        socket.gethostbyname(socket.gethostname().split(".")[0])
    except OSError:
        env["MASTER_ADDR"] = "127.0.0.1"
    run(["sbatch", "--wait", "--nodes=1", f"--ntasks-per-node={WORLD}", f"--output={log}",
         os.path.join(ROOT, "examples", "launchers", "hello.sbatch")], env)
    check([log.read_text()])


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
