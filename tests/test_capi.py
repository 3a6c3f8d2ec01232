"""The C API (include/uccl/uccl.h): installed with cmake --install, found with pkg-config and
find_package(uccl) (also from the installed Python package), every collective from C against
known results, error paths, a dead peer, and the C / C++ examples under mpirun."""
import os
import shutil
import subprocess
import sys

import pytest

from harness import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build", "ctest")  # scripts/test.sh's C++ build; made here when missing
MPIRUN_ENV = {"OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_rmaps_base_oversubscribe": "1"}

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("cc") is None,
                                reason="cmake and a C compiler are needed")


def run(cmd, timeout=600, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """uccl installed with `cmake --install` into a fresh prefix."""
    if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
        run(["cmake", "-S", ROOT, "-B", BUILD, "-G", "Ninja", "-DUCCL_BUILD_TESTS=ON"])
    run(["cmake", "--build", BUILD, "--target", "uccl"], timeout=1800)
    dest = tmp_path_factory.mktemp("prefix")
    run(["cmake", "--install", BUILD, "--prefix", str(dest)])
    return dest


def pkg_config(pcdir, *args):
    if shutil.which("pkg-config") is None:
        pytest.skip("pkg-config is not installed")
    return run(["pkg-config", *args, "uccl"], env=dict(os.environ, PKG_CONFIG_PATH=str(pcdir))).split()


@pytest.fixture(scope="module")
def capi_test(prefix, tmp_path_factory):
    exe = tmp_path_factory.mktemp("capi") / "capi_test"
    flags = pkg_config(prefix / "lib" / "pkgconfig", "--cflags", "--libs")
    run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-o", str(exe), os.path.join(ROOT, "tests", "capi", "capi_test.c"),
         *flags])
    return exe


def run_ranks(exe, scenario, world, expect_killed=()):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("UCCL_")}
    procs = [subprocess.Popen([str(exe), scenario, str(r), str(world), str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for r in range(world)]
    outs = []
    try:
        for r, p in enumerate(procs):
            out, err = p.communicate(timeout=180)
            outs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, (rc, out, err) in enumerate(outs):
        if r in expect_killed:
            assert rc == -9, f"rank {r} was to die by SIGKILL, exited {rc}:\n{out}{err}"
        else:
            assert rc == 0 and "CAPI-OK" in out, f"rank {r} ({scenario}) exited {rc}:\n{out}\n{err[-3000:]}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("world", [1, 2, 4])
def test_every_collective_from_c(capi_test, world):
    run_ranks(capi_test, "collectives", world)


@pytest.mark.timeout(900)
def test_error_paths_from_c(capi_test):
    """bad rank, bad enums, NULL handles, bad root/peer, different counts on different ranks."""
    run_ranks(capi_test, "errors", 3)


@pytest.mark.timeout(900)
def test_dead_peer_from_c(capi_test):
    run_ranks(capi_test, "dead-peer", 3, expect_killed={2})


@pytest.mark.timeout(900)
def test_shrink_after_rank0_dies_from_c(capi_test):
    """uccl_comm_shrink: rank 0 (it served the store) dies; the survivors agree, re-create the
    store and all_reduce exactly on the new communicator."""
    run_ranks(capi_test, "shrink", 3, expect_killed={0})


@pytest.mark.timeout(900)
def test_shrink_excluding_from_c(capi_test):
    """uccl_comm_shrink_excluding: rank 3 dies, rank 1 leaves without calling; ranks 0 and 2 name
    both and all_reduce exactly on the new communicator (bad lists: UCCL_ERR_INVALID_ARGUMENT)."""
    run_ranks(capi_test, "shrink-excluding", 4, expect_killed={3})


@pytest.mark.timeout(900)
def test_grow_by_a_joiner_from_c(capi_test):
    """uccl_comm_grow on ranks 0, 1 and uccl_comm_join on rank 2 (the same store address and tag)."""
    run_ranks(capi_test, "grow", 3)


def build_examples(uccl_dir, build):
    run(["cmake", "-S", os.path.join(ROOT, "examples", "c"), "-B", str(build), "-G", "Ninja", f"-Duccl_DIR={uccl_dir}"])
    run(["cmake", "--build", str(build)])


def mpirun(np, exe, env_extra=None, forward=()):
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("UCCL_")}
    env.update(MPIRUN_ENV, **(env_extra or {}))
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np)]
    for name in forward:
        cmd += ["-x", name]
    return run(cmd + [str(exe)], timeout=180, env=env)


def check_examples(build):
    if os.path.exists(build / "allreduce_mpi"):
        out = mpirun(3, build / "allreduce_mpi")
        assert out.count("all_gather ok") == 3, out
    out = mpirun(4, build / "ring", {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())},
                 forward=("MASTER_ADDR", "MASTER_PORT"))
    assert out.count("ring token 1006, 2 ranks in my half: ok") == 4, out


@pytest.mark.timeout(900)
def test_examples_from_cmake_install_under_mpirun(prefix, tmp_path):
    build_examples(prefix / "lib" / "cmake" / "uccl", tmp_path / "ex")
    check_examples(tmp_path / "ex")


@pytest.mark.timeout(900)
def test_examples_from_the_python_package_under_mpirun(tmp_path):
    """python -m uccl.info --cmakedir, like pybind11 --cmakedir: the wheel carries the headers,
    libuccl, ucclConfig.cmake and uccl.pc."""
    cmakedir = run([sys.executable, "-m", "uccl.info", "--cmakedir"], cwd=tmp_path).strip()
    assert os.path.exists(os.path.join(cmakedir, "ucclConfig.cmake")), cmakedir
    pcdir = run([sys.executable, "-m", "uccl.info", "--pkgconfigdir"], cwd=tmp_path).strip()
    version = pkg_config(pcdir, "--modversion")[0]
    import uccl
    assert version == uccl.__version__
    build_examples(cmakedir, tmp_path / "ex")
    check_examples(tmp_path / "ex")
