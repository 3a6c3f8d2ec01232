"""The Python surface: python -m uccl.info, build_info(), config(), uccl.init() under plain
environment variables and under mpirun, packaging entry points, and the buffer kinds accepted
(numpy, bytearray / bytes, memoryview, array.array, DLPack)."""
import array
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import uccl
from harness import free_port, run_world

BUILD_INFO_KEYS = {"version", "verbs", "cuda", "torch", "build_type", "sanitizers", "verbs_available",
                   "verbs_unavailable_reason"}


def _clean_env(**extra):
    """The environment without launcher variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMI_", "PMIX_", "SLURM_", "TORCHELASTIC_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.setdefault("UCCL_DEBUG", "NONE")
    env.update(extra)
    return env


# ---- info / build_info / config -------------------------------------------------------------------

def test_info_prints_every_variable(tmp_path):
    env = _clean_env(UCCL_NSOCKS_PERPEER="3", UCCL_SHM_RING_BYTES="1M")
    p = subprocess.run([sys.executable, "-m", "uccl.info"], env=env, capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    names = [v["name"] for v in uccl.config()]
    assert len(names) >= 20
    missing = [n for n in names if n not in out]
    assert not missing, f"python -m uccl.info does not print {missing}"
    lines = {line.split()[0].lstrip("*"): line for line in out.splitlines() if line.strip().lstrip("*").startswith("UCCL_")}
    assert "*UCCL_NSOCKS_PERPEER" in lines["UCCL_NSOCKS_PERPEER"] and "= 3 " in lines["UCCL_NSOCKS_PERPEER"], \
        lines["UCCL_NSOCKS_PERPEER"]
    assert "= 1M" in lines["UCCL_SHM_RING_BYTES"]
    assert not lines["UCCL_TIMEOUT_S"].lstrip().startswith("*"), "an unset variable is marked as set"
    info = uccl.build_info()
    assert f"uccl {info['version']}" in out
    assert "network interfaces" in out and "lo" in out


def _editable_checkout():
    """The checkout an editable install of uccl points at (the README's set-up), or None."""
    try:
        direct = importlib.metadata.distribution("uccl").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    info = json.loads(direct or "{}")
    if not info.get("dir_info", {}).get("editable"):
        return None
    return info["url"].removeprefix("file://")


def test_readme_commands_work_from_the_repository_root():
    """After the README's set-up (an editable install), the commands run from the checkout's root:
    the source uccl/ is the package, with the compiled _core from the install beside it."""
    root = _editable_checkout()
    if root is None:
        pytest.skip("uccl is not an editable install (the README's set-up is pip install -e .)")
    env = _clean_env()
    p = subprocess.run([sys.executable, "-m", "uccl.info"], env=env, capture_output=True, text=True,
                       timeout=60, cwd=root)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "network interfaces" in p.stdout
    perf = shutil.which("uccl-perf", path=os.path.dirname(sys.executable)) or shutil.which("uccl-perf")
    assert perf, "the uccl-perf entry point is not installed"
    p = subprocess.run([perf, "all_reduce", "-N", "2", "-b", "8", "-e", "64", "-f", "8", "-n", "2", "-w", "1"],
                       env=env, capture_output=True, text=True, timeout=240, cwd=root)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "Out of bounds values : 0 OK" in p.stdout


def test_build_info_keys():
    info = uccl.build_info()
    assert BUILD_INFO_KEYS <= set(info), f"missing {BUILD_INFO_KEYS - set(info)}"
    assert info["version"] == uccl.__version__
    for k in ("verbs", "cuda", "torch", "sanitizers", "verbs_available"):
        assert isinstance(info[k], bool), (k, info[k])
    assert isinstance(info["build_type"], str) and info["build_type"]
    if not info["verbs_available"]:
        assert info["verbs_unavailable_reason"], "verbs unavailable without a reason"
    if not info["verbs"]:
        assert not info["verbs_available"]


def test_config_table():
    table = uccl.config()
    names = [v["name"] for v in table]
    assert len(set(names)) == len(names), "duplicate variables"
    for v in table:
        assert set(v) >= {"name", "value", "default", "meaning", "is_set"}, v
        assert v["name"].startswith("UCCL_") and v["meaning"], v
        if not v["is_set"]:
            assert v["value"] == v["default"], v
    for must in ("UCCL_TIMEOUT_S", "UCCL_TRANSPORT", "UCCL_ALGO", "UCCL_HOST_ID", "UCCL_SOCKET_IFNAME",
                 "UCCL_DEBUG"):
        assert must in names


def test_every_variable_is_documented_in_readme():
    readme = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
    text = open(readme).read()
    missing = [v["name"] for v in uccl.config() if f"`{v['name']}`" not in text]
    assert not missing, f"README.md's variable table lacks {missing} (regenerate it from python -m uccl.info)"


def test_entry_points_resolve():
    """Every entry point the installed package declares must import: a dangling torch.backends
    entry point makes `import torch` itself fail once uccl is installed."""
    dist = importlib.metadata.distribution("uccl")
    broken = []
    for ep in dist.entry_points:
        module = ep.value.split(":")[0]
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            broken.append(f"{ep.group}: {ep.name} = {ep.value} (no module {module})")
    assert not broken, "entry points point at missing modules:\n" + "\n".join(broken)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_import_torch_still_works_with_uccl_installed(tmp_path):
    p = subprocess.run([sys.executable, "-c", "import torch; print('ok')"], env=_clean_env(), capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr[-2000:]


# ---- uccl.init() ----------------------------------------------------------------------------------

INIT_SCRIPT = textwrap.dedent("""
    import json, numpy as np, uccl
    comm = uccl.init(timeout=60)
    x = np.full(5, comm.rank + 1, np.int64)
    comm.all_reduce(x)
    g = comm.all_gather(np.array([comm.rank], np.int32))
    comm.barrier()
    print("RESULT " + json.dumps({"rank": comm.rank, "size": comm.size, "sum": x.tolist(), "gather": g.tolist()}))
""")


def _results(outputs):
    res = []
    for out in outputs:
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert lines, f"no RESULT line in:\n{out}"
        res.append(json.loads(lines[-1][len("RESULT "):]))
    return sorted(res, key=lambda r: r["rank"])


def _check_world(res, n):
    assert [r["rank"] for r in res] == list(range(n))
    for r in res:
        assert r["size"] == n
        assert r["sum"] == [n * (n + 1) // 2] * 5
        assert r["gather"] == list(range(n))


def test_init_from_plain_environment(tmp_path):
    n, port = 3, free_port()
    procs = [subprocess.Popen([sys.executable, "-c", INIT_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, cwd=tmp_path,
                              env=_clean_env(RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                                             MASTER_PORT=str(port)))
             for r in range(n)]
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=90)
            assert p.returncode == 0, out
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    _check_world(_results(outs), n)


def test_init_without_a_launcher_is_a_single_rank(tmp_path):
    p = subprocess.run([sys.executable, "-c", INIT_SCRIPT], env=_clean_env(), capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    _check_world(_results([p.stdout]), 1)


def test_init_missing_master_port_is_an_invalid_argument(tmp_path):
    code = ("import uccl\ntry:\n    uccl.init()\nexcept uccl.InvalidArgument as e:\n    print('IA', e)\n")
    p = subprocess.run([sys.executable, "-c", code], env=_clean_env(RANK="1", WORLD_SIZE="2"), capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert "IA" in p.stdout and "MASTER_PORT" in p.stdout, p.stdout + p.stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")
def test_init_under_mpirun(tmp_path):
    pytest.importorskip("mpi4py")
    env = _clean_env(OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_rmaps_base_oversubscribe="1")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3", sys.executable, "-c", INIT_SCRIPT]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert p.returncode == 0, f"mpirun failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    # mpirun forwards the ranks' stdout concurrently: two RESULT records can share a line, so
    # decode one JSON object after each marker instead of splitting by lines.
    decoder, records = json.JSONDecoder(), []
    for part in p.stdout.split("RESULT ")[1:]:
        records.append(decoder.raw_decode(part)[0])
    _check_world(sorted(records, key=lambda r: r["rank"]), 3)


# ---- buffer kinds ---------------------------------------------------------------------------------

class DLPackOnly:
    """Exposes an array only through the DLPack protocol (not an ndarray, no buffer protocol)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def body_buffers(ctx):
    import uccl
    comm, me, n, check = ctx.comm, ctx.rank, ctx.world, ctx.check
    # bytearray: in place, uint8 arithmetic wraps
    b = bytearray([200, me, 3])
    comm.all_reduce(b)
    check.equal(np.frombuffer(bytes(b), np.uint8), np.array([(200 * n) % 256, sum(range(n)), 3 * n], np.uint8),
                "all_reduce(bytearray) in place")
    # bytes: fine as an input, refused as an in-place output
    got = comm.all_gather(b"ab")
    check.equal(got, np.frombuffer(b"ab" * n, np.uint8), "all_gather(bytes)")
    try:
        comm.all_reduce(b"xyz")
        check.fail("all_reduce(bytes) in place did not raise")
    except uccl.InvalidArgument as e:
        check.true("read-only" in str(e), f"all_reduce(bytes): {e}")
    # memoryview of a bytearray
    mb = bytearray(4)
    mb[0] = me + 1
    comm.all_reduce(memoryview(mb))
    check.equal(np.frombuffer(bytes(mb), np.uint8), np.array([n * (n + 1) // 2, 0, 0, 0], np.uint8),
                "all_reduce(memoryview(bytearray))")
    # DLPack-only object: written in place through the capsule
    a = np.arange(6, dtype=np.float32) + me
    comm.all_reduce(DLPackOnly(a))
    check.equal(a, (np.arange(6, dtype=np.float32) * n + sum(range(n))).astype(np.float32), "all_reduce(DLPack)")
    out = comm.all_gather(DLPackOnly(np.full(2, me, np.int64)))
    check.equal(np.asarray(out), np.repeat(np.arange(n, dtype=np.int64), 2), "all_gather(DLPack)")
    # numpy scalar-shaped and multi-dimensional contiguous arrays
    m = np.full((2, 3), me, np.int32)
    comm.all_reduce(m)
    check.equal(m, np.full((2, 3), sum(range(n)), np.int32), "all_reduce(2-D array)")
    return True


def test_buffer_protocol_and_dlpack_inputs():
    run_world(2, "test_api:body_buffers", transport="auto", timeout=60)


def body_typed_buffers(ctx):
    """Buffers that carry an element type (memoryview of float32 data, array.array('d'))."""
    comm, me, n, check = ctx.comm, ctx.rank, ctx.world, ctx.check
    f = np.full(3, 1.5 + me, np.float32)
    comm.all_reduce(memoryview(f))
    check.equal(f, np.full(3, sum(1.5 + p for p in range(n)), np.float32), "all_reduce(memoryview(float32 array))")
    d = array.array("d", [0.25 * (me + 1), 2.0])
    comm.all_reduce(d)
    check.true(list(d) == [0.25 * n * (n + 1) / 2, 2.0 * n], f"all_reduce(array.array('d')) gave {list(d)}")
    g = comm.all_gather(array.array("i", [me, -me]))
    check.equal(np.asarray(g), np.array([v for p in range(n) for v in (p, -p)], np.int32),
                "all_gather(array.array('i')) keeps int32 elements")
    return True


def test_typed_buffers_keep_their_element_type():
    """Open bug (uccl/_buffers.py as_buffer): buffer-protocol objects are read with
    np.frombuffer(memoryview(obj), dtype=uint8), ignoring the buffer's format, so an
    array.array('d') or a memoryview of float32 data is reduced byte by byte as uint8."""
    run_world(2, "test_api:body_typed_buffers", transport="auto", timeout=60)


def body_noncontiguous_memoryview(ctx):
    import uccl
    try:
        ctx.comm.all_reduce(memoryview(np.arange(8, dtype=np.float32))[::2])
        return "no error", ""
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__module__}.{type(e).__name__}", str(e)


def test_non_contiguous_memoryview_is_an_invalid_argument():
    """Open bug (uccl/_buffers.py): np.frombuffer raises BufferError for a non-contiguous
    memoryview and as_buffer lets it escape instead of raising uccl.InvalidArgument."""
    [(kind, msg)] = run_world(1, "test_api:body_noncontiguous_memoryview", timeout=30)
    assert kind == "uccl.errors.InvalidArgument" and "contiguous" in msg, f"{kind}: {msg}"


def body_scatter_count(ctx):
    import uccl
    comm, me = ctx.comm, ctx.rank
    ctx.linger = False
    try:
        if me == 0:
            got = comm.scatter(np.arange(8, dtype=np.float32), root=0)
        else:
            got = comm.scatter(None, root=0, count=4)
        return "ok", np.asarray(got).tolist()
    except uccl.UcclError as e:
        if me == 0:
            comm.abort("peer failed")
        return type(e).__name__, str(e)


def test_scatter_count_argument_on_non_roots():
    """Open API bug (uccl/comm.py scatter): the docstring says non-roots pass x=None and out
    "(or count)", and the signature takes count=, but count is ignored: a non-root that passes
    count instead of out gets InvalidArgument "non-root ranks must pass out" (and the root
    then waits for it). Either honour count (the dtype would have to be given too) or drop it."""
    results = run_world(2, "test_api:body_scatter_count", timeout=60, comm_timeout=2)
    assert results[1] == ("ok", [4.0, 5.0, 6.0, 7.0]), results


def body_estimate(ctx):
    """comm.estimate / estimate_p2p: local predictions on the communicator's own topology."""
    comm, check = ctx.comm, ctx.check
    small, large = comm.estimate("all_reduce", 1 << 20), comm.estimate("all_reduce", 64 << 20)
    check.true(0 < small < large, f"all_reduce estimates {small} {large}")
    check.true(comm.estimate("barrier", 0) > 0, "barrier estimate")
    check.true(comm.estimate_p2p(sends=[(1 - ctx.rank, 1 << 20)], recvs=[(None, 1 << 20)]) > 0, "p2p estimate")
    for bad, kwargs in (("allreduce", {}), ("broadcast", {"root": ctx.world})):
        try:
            comm.estimate(bad, 8, **kwargs)
            check.true(False, f"estimate({bad!r}, {kwargs}) did not raise")
        except uccl.InvalidArgument:
            pass
    return large


def test_estimate_reads_the_communicators_topology():
    """The same all_reduce is predicted slower between two hosts (tcp) than inside one (shm)."""
    one_host = run_world(2, "test_api:body_estimate", timeout=60)
    two_hosts = run_world(2, "test_api:body_estimate", host_ids=["h0", "h1"], timeout=60)
    assert one_host[0] == one_host[1] and two_hosts[0] == two_hosts[1], (one_host, two_hosts)
    assert two_hosts[0] > one_host[0], (one_host, two_hosts)


def body_estimate_with_a_forced_algorithm(ctx):
    """A forced algorithm that cannot run here (rhd on 3 ranks): the operation runs a plain one,
    and the estimate predicts that one instead of refusing (it raised InvalidArgument "rhd cannot
    run all_reduce here", found by tests/thread_soak.py's watcher)."""
    comm = ctx.comm
    x = np.ones(1 << 16, np.float32)
    comm.all_reduce(x)
    ctx.check.true(bool((x == ctx.world).all()), f"all_reduce gave {x[:4]}")
    return comm.estimate("all_reduce", x.nbytes), comm.estimate("reduce_scatter", x.nbytes)


def test_estimate_with_a_forced_algorithm_that_cannot_run():
    forced = run_world(3, "test_api:body_estimate_with_a_forced_algorithm", algorithm="rhd", timeout=60)
    assert all(a > 0 and b > 0 for a, b in forced), forced


def body_estimating(ctx):
    """comm.estimating(): the program's own calls run nothing and add up their predictions."""
    comm, me, n, check = ctx.comm, ctx.rank, ctx.world, ctx.check
    x = np.full(1 << 18, float(me + 1), np.float32)
    gathered = np.full(n << 10, -1.0, np.float32)
    with comm.estimating() as est:
        comm.all_reduce(x)                                   # the blocking fast path
        comm.all_gather(np.ones(1 << 10, np.float32), out=gathered)
        comm.broadcast(x, root=n - 1, async_op=True).wait()
        comm.barrier()
    want = (comm.estimate("all_reduce", x.nbytes) + comm.estimate("all_gather", gathered.nbytes)
            + comm.estimate("broadcast", x.nbytes, root=n - 1) + comm.estimate("barrier", 0))
    check.true(est.operations == 4 and abs(est.seconds - want) <= 1e-12 * want, f"{est} against {want}")
    check.true(bool((x == me + 1).all()) and bool((gathered == -1).all()), "estimating touched a buffer")
    try:
        with comm.estimating():
            comm.split(color=0)
        check.true(False, "split inside estimating() did not raise")
    except uccl.NotSupported:
        pass
    if me == 0:  # alone: nobody else is in a collective meanwhile
        with comm.estimating() as alone:
            for _ in range(20):
                comm.all_reduce(x)
        check.true(alone.operations == 20 and alone.seconds > 0, f"{alone}")
    comm.barrier()
    comm.all_reduce(x)  # the real one, after the blocks: nothing of them reached the peers
    check.true(bool((x == n * (n + 1) / 2).all()), f"all_reduce after estimating gave {x[:4]}")
    return True


def test_estimating_block():
    run_world(3, "test_api:body_estimating", timeout=60)


def test_uccl_threads_are_named():
    """top -H / perf / /proc show which of uccl's threads spends the CPU (base/thread_name.h)."""
    code = textwrap.dedent(f"""
        import glob, numpy as np, uccl
        from uccl.sim import SimArray
        store = uccl.TcpStore("127.0.0.1", {free_port()}, is_server=True)
        comm = uccl.Communicator(0, 1, store)
        x = SimArray.from_numpy(np.ones(8, np.float32))
        comm.all_reduce(x)
        names = sorted({{open(t + "/comm").read().strip() for t in glob.glob("/proc/self/task/*")}})
        print(",".join(names))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    names = out.stdout.strip().split(",")
    assert "uccl-store" in names and "uccl-sim-d0" in names, names
