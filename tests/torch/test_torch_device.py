"""Any torch accelerator through the staged path (issue 15, item 3), on a test device of our own.

tests/torch/uccl_test_device.cpp is a PrivateUse1 device ("uccltest"): host memory that torch
reaches only through the device's own kernels (empty, _copy_from, ...; everything else runs
through torch's CPU fallback), with counters on its copy function. It is built here with
torch.utils.cpp_extension (ninja and a C++ compiler, nothing downloaded). The checks:
torch.accelerator reports it and "uccl" serves it without being told; every op gives the same
results on uccltest tensors as on CPU tensors, the results stay on the device, and the bytes
went through the device's copies; a job where one rank holds CPU tensors and the others device
tensors works; a failing device copy is a clear error (before the op, or on the work after it)
and leaves the group usable; DDP (with comm hooks), FSDP2, a 2-D DeviceMesh with tensor
parallelism and torch.distributed.pipelining give on the device what they give on the CPU
(issue 15, item 5, on the test device; tests/gpu runs the same checks on CUDA); a checkpoint
(torch.distributed.checkpoint) saved on the device loads resharded on another world size; the
plain Python API (uccl.Communicator) takes the device's tensors, staged by torch's copies."""
import pytest
import uccl

if not uccl.build_info().get("torch"):  # the build says so; never guess from imports
    pytest.skip("uccl built without the torch backend", allow_module_level=True)

import os
import shutil
import subprocess
import sys
import tempfile
import time
import types

import torch
import torch.distributed as dist

import torch_dist_util as U

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "uccl_test_device.cpp")
DEV = "uccltest"


def build_dir():
    tag = torch.__version__.replace("+", "_")
    return os.path.join(tempfile.gettempdir(), f"uccl_test_device_{tag}_{os.getuid()}")


def build_extension():
    """Builds the extension (once; later calls only load it) and loads it into this process.
    It links the installed uccl's libuccl (its simulated device backs the tensors in the
    direct mode) and takes the device interface from this checkout's headers."""
    from torch.utils import cpp_extension
    from uccl import _core

    d = build_dir()
    os.makedirs(d, exist_ok=True)
    lib = os.path.dirname(os.path.abspath(_core.__file__))
    root = os.path.dirname(os.path.dirname(HERE))
    return cpp_extension.load(name="uccl_test_device", sources=[SRC], build_directory=d, extra_cflags=["-O1"],
                              extra_include_paths=[os.path.join(root, "include"), os.path.join(root, "cpp")],
                              extra_ldflags=[f"-L{lib}", "-luccl", f"-Wl,-rpath,{lib}"])


def load_device():
    """Loads and registers the test device in this process; returns its module."""
    ext = build_extension()
    torch.utils.rename_privateuse1_backend(DEV)
    torch._register_device_module(DEV, device_module())
    torch.utils.generate_methods_for_privateuse1_backend()
    return ext


def device_module():
    """torch's device module for it (what torch.xpu is for xpu): what DDP, FSDP2, DeviceMesh and
    pipelining ask of a device's module. Streams and events are torch's generic ones, served by
    the device's guard (uccl_test_device.cpp: simulated streams and events with its memory)."""
    import contextlib

    mod = types.ModuleType(DEV)
    mod.is_available = lambda: True
    mod.device_count = lambda: 1
    mod.current_device = lambda: 0
    mod.set_device = lambda device: None
    mod.is_initialized = lambda: True
    mod._is_in_bad_fork = lambda: False
    mod.manual_seed = mod.manual_seed_all = lambda seed: None
    mod.get_rng_state = lambda device=None: torch.get_rng_state()  # the CPU generator serves it
    mod.set_rng_state = lambda state, device=None: torch.set_rng_state(state)
    mod.Stream = lambda device=None, priority=0, **_: torch.Stream(device=DEV, priority=priority)
    mod.Event = lambda enable_timing=False, blocking=False, interprocess=False: torch.Event(device=DEV)
    mod.current_stream = lambda device=None: torch.accelerator.current_stream(DEV)
    mod.synchronize = lambda device=None: torch.accelerator.synchronize(DEV)

    @contextlib.contextmanager
    def stream(s):
        if s is None:
            yield
            return
        prev = torch.accelerator.current_stream(DEV)
        torch.accelerator.set_stream(s)
        try:
            yield
        finally:
            torch.accelerator.set_stream(prev)

    mod.stream = stream
    mod.device = lambda device: contextlib.nullcontext()  # one device: nothing to switch (torch.load's)
    return mod


@pytest.fixture(scope="module")
def device_built():
    if shutil.which("ninja") is None or shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.fail("building the test device needs ninja and a C++ compiler (scripts/setup.sh installs them)")
    # Built once here, so that the ranks only load it; in a child process, because loading it
    # makes PrivateUse1 this process's accelerator, which must not leak into other tests.
    r = subprocess.run([sys.executable, "-c", "import test_torch_device as t; t.build_extension()"], cwd=HERE,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"building the test device failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


def dev(t):
    return t.to(DEV)


def check_ops(rank, world, ext, direct=False):
    """Every op on uccltest tensors against the same op on CPU tensors (both over uccl).
    direct: the memory is uccl's simulated device, used in place: torch copies nothing."""
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        for n in (0, 1, 13, 4099):
            x = U.make_input(rank, n, dtype)
            for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
                a, b = dev(x), x.clone()
                ext.reset_copy_stats()
                dist.all_reduce(a, op=op)
                st = ext.copy_stats()
                dist.all_reduce(b, op=op)
                assert a.device.type == DEV
                U.assert_same(a.cpu(), b, f"all_reduce {op} {dtype} n={n}")
                nbytes = n * x.element_size()
                if direct and n:  # in place: no copy out of the device or back
                    assert st["d2h_calls"] == 0 and st["h2d_calls"] == 0, (st, nbytes)
                elif not direct:  # staged: out of the device before, back in after
                    assert st["d2h_bytes"] >= nbytes and st["h2d_bytes"] >= nbytes, (st, nbytes)
    # Larger than one staging chunk (4 MiB): copied out chunk by chunk, each chunk's all_reduce
    # issued as soon as it is on the host; the result goes back in one copy (in place: none).
    for dtype in (torch.float32, torch.complex64):
        x = U.make_input(rank, (5 << 20) // 4 + 3, dtype)
        a, b = dev(x), x.clone()
        ext.reset_copy_stats()
        dist.all_reduce(a)
        st = ext.copy_stats()
        dist.all_reduce(b)
        U.assert_same(a.cpu(), b, f"chunked all_reduce {dtype}")
        chunks = -(-x.numel() * x.element_size() // (4 << 20))
        want = (0, 0) if direct else (chunks, 1)
        assert (st["d2h_calls"], st["h2d_calls"]) == want, (st, want)
    x = U.make_input(rank, 7, torch.float32)
    a = dev(x)
    dist.all_reduce(a, op=dist.ReduceOp.AVG)
    b = x.clone()
    dist.all_reduce(b, op=dist.ReduceOp.AVG)
    U.assert_same(a.cpu(), b, "all_reduce AVG")
    # broadcast, reduce
    a = dev(U.make_input(rank, 9, torch.float64))
    dist.broadcast(a, src=1)
    U.assert_same(a.cpu(), U.make_input(1, 9, torch.float64), "broadcast")
    a, b = dev(U.make_input(rank, 9, torch.int32)), U.make_input(rank, 9, torch.int32)
    dist.reduce(a, dst=2)
    dist.reduce(b, dst=2)
    if rank == 2:
        U.assert_same(a.cpu(), b, "reduce")
    # all_gather (list and into a tensor), reduce_scatter_tensor, all_to_all_single (uneven)
    x = U.make_input(rank, 5, torch.float32)
    outs = [dev(torch.zeros(5)) for _ in range(world)]
    dist.all_gather(outs, dev(x))
    for r in range(world):
        assert outs[r].device.type == DEV
        U.assert_same(outs[r].cpu(), U.make_input(r, 5, torch.float32), f"all_gather from {r}")
    big = dev(torch.zeros(5 * world))
    dist.all_gather_into_tensor(big, dev(x))
    U.assert_same(big.cpu(), torch.cat([U.make_input(r, 5, torch.float32) for r in range(world)]), "all_gather_into_tensor")
    inp = U.make_input(rank, 4 * world, torch.float32)
    a, b = dev(torch.zeros(4)), torch.zeros(4)
    dist.reduce_scatter_tensor(a, dev(inp))
    dist.reduce_scatter_tensor(b, inp)
    U.assert_same(a.cpu(), b, "reduce_scatter_tensor")
    in_splits = [r + 1 for r in range(world)]  # rank sends r+1 rows to rank r
    out_splits = [rank + 1] * world
    inp = U.make_input(rank, sum(in_splits) * 2, torch.float32).reshape(-1, 2)
    a = dev(torch.zeros(sum(out_splits), 2))
    b = torch.zeros(sum(out_splits), 2)
    dist.all_to_all_single(a, dev(inp), out_splits, in_splits)
    dist.all_to_all_single(b, inp, out_splits, in_splits)
    U.assert_same(a.cpu(), b, "all_to_all_single uneven")
    # gather / scatter
    x = U.make_input(rank, 3, torch.int64)
    gl = [dev(torch.zeros(3, dtype=torch.int64)) for _ in range(world)] if rank == 0 else None
    dist.gather(dev(x), gl, dst=0)
    if rank == 0:
        for r in range(world):
            U.assert_same(gl[r].cpu(), U.make_input(r, 3, torch.int64), f"gather from {r}")
    sl = [dev(U.make_input(r, 3, torch.int64, salt=9)) for r in range(world)] if rank == 1 else None
    got = dev(torch.zeros(3, dtype=torch.int64))
    dist.scatter(got, sl, src=1)
    U.assert_same(got.cpu(), U.make_input(rank, 3, torch.int64, salt=9), "scatter")
    # p2p ring (even/odd order), batch_isend_irecv, recv from any source into a device tensor
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    y = dev(torch.zeros(6))
    if rank % 2 == 0:
        dist.send(dev(U.make_input(rank, 6, torch.float32)), nxt)
        dist.recv(y, prv)
    else:
        dist.recv(y, prv)
        dist.send(dev(U.make_input(rank, 6, torch.float32)), nxt)
    U.assert_same(y.cpu(), U.make_input(prv, 6, torch.float32), "send/recv")
    r1 = dev(torch.zeros(4))
    ops = [dist.P2POp(dist.isend, dev(U.make_input(rank, 4, torch.float32, salt=3)), nxt),
           dist.P2POp(dist.irecv, r1, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    U.assert_same(r1.cpu(), U.make_input(prv, 4, torch.float32, salt=3), "batch_isend_irecv")
    if rank == 0:
        z = dev(torch.zeros(2))
        src = dist.recv(z, tag=4)
        assert src in (1, 2) and z.cpu().tolist() == [float(src)] * 2
        src2 = dist.recv(z, tag=4)
        assert {src, src2} == {1, 2}
    else:
        dist.send(dev(torch.full((2,), float(rank))), 0, tag=4)
    dist.barrier()
    # async: the future's value is the device tensor itself
    a = dev(torch.ones(3))
    fut = dist.all_reduce(a, async_op=True).get_future()
    val = fut.wait()[0]
    assert val.device.type == DEV and val.cpu().tolist() == [float(world)] * 3


def strided(t):
    """t's values as every other element of a device buffer (a non-contiguous device tensor)."""
    import torch_soak

    v = torch_soak._placed(t, DEV, "strided")
    assert not v.is_contiguous()
    return v


def check_strided(rank, world, ext, direct):
    """Non-contiguous device tensors beside contiguous ones in one call. In place (direct), they
    go through contiguous copies on the device: nothing crosses to the host, and the call's
    buffers are all device memory (a host copy beside a tensor used in place made it refuse the
    call: "buffers in different places (host and sim device 0)")."""
    n = 5
    full = [U.make_input(r, n * world, torch.float32, salt=7) for r in range(world)]
    total = sum(full)

    def run(what, op):
        ext.reset_copy_stats()
        op()
        st = ext.copy_stats()
        if direct:
            assert st["d2h_calls"] == 0 and st["h2d_calls"] == 0 and st["d2d_calls"] > 0, (what, st)
        else:  # staged through the host, as every tensor of this device is
            assert st["d2h_calls"] > 0 and st["h2d_calls"] > 0, (what, st)

    out, inp = dev(torch.zeros(n)), strided(full[rank])
    run("reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(out, inp))  # strided in, dense out
    U.assert_same(out.cpu(), total[rank * n:(rank + 1) * n], "reduce_scatter_tensor, strided input")
    gathered, inp = strided(torch.zeros(n * world)), dev(full[rank][:n])
    run("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(gathered, inp))  # dense in, strided out
    U.assert_same(gathered.cpu(), torch.cat([f[:n] for f in full]), "all_gather_into_tensor, strided output")
    x = strided(full[rank])
    run("all_reduce", lambda: dist.all_reduce(x))
    U.assert_same(x.cpu(), total, "all_reduce, strided")
    outs, inp = [strided(torch.zeros(n)) if r % 2 else dev(torch.zeros(n)) for r in range(world)], strided(full[rank][:n])
    run("all_gather", lambda: dist.all_gather(outs, inp))
    for r in range(world):
        U.assert_same(outs[r].cpu(), full[r][:n], f"all_gather, block {r}")
    # p2p: a batch with a dense send and a strided receive is one call, too
    got, send = strided(torch.zeros(n)), dev(full[rank][:n])
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    run("batch_isend_irecv", lambda: [w.wait() for w in dist.batch_isend_irecv(
        [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, got, prv)])])
    U.assert_same(got.cpu(), full[prv][:n], "batch_isend_irecv, strided receive")
    dist.barrier()


def check_mixed(rank, world):
    """One rank on CPU tensors, the others on the device: one job, one group."""
    x = U.make_input(rank, 11, torch.float32)
    a = x.clone() if rank == 0 else dev(x)
    dist.all_reduce(a)
    want = sum(U.make_input(r, 11, torch.float32) for r in range(world))
    U.assert_same(a.cpu(), want, f"mixed all_reduce (rank {rank} on {a.device})")
    outs = [torch.zeros(11) if rank == 0 else dev(torch.zeros(11)) for _ in range(world)]
    dist.all_gather(outs, a)
    for o in outs:
        U.assert_same(o.cpu(), want, "mixed all_gather")


def check_copy_errors(rank, world, ext):
    # A device-to-host copy that fails: raised at the call, before anything is issued (on
    # every rank alike here), and the group goes on.
    a = dev(torch.ones(4))
    ext.fail_next_copies(1)
    with pytest.raises(RuntimeError, match="injected copy failure"):
        dist.all_reduce(a)
    ext.fail_next_copies(0)
    # The copy back to the device fails: the op itself completed, the work reports the error.
    ext.fail_next_copies(1, h2d_only=True)
    with pytest.raises(RuntimeError, match="injected copy failure"):
        dist.all_reduce(a)
    ext.fail_next_copies(0)
    b = dev(torch.ones(4))
    dist.all_reduce(b)
    assert b.cpu().tolist() == [float(world)] * 4
    # A chunked all_reduce whose second chunk cannot be copied out on rank 0, after the first
    # chunk's all_reduce was issued: rank 0 aborts that group, its peers fail at once naming it.
    u = dist.new_group(backend="uccl", pg_options=uccl.ProcessGroupOptions(timeout=60))
    warm = torch.ones(1)
    dist.all_reduce(warm, group=u)  # connected, so that the failure travels with its root cause
    dist.barrier(group=u)
    big = dev(torch.ones((6 << 20) // 4))
    if rank == 0:
        ext.fail_next_copies(1, skip=1)
    start = time.monotonic()
    with pytest.raises(dist.DistBackendError) as e:
        dist.all_reduce(big, group=u)
    ext.fail_next_copies(0)
    assert time.monotonic() - start < 20, time.monotonic() - start
    if rank == 0:
        assert "the process group was aborted" in str(e.value) and "injected copy failure" in str(e.value), str(e.value)
    else:  # directly from rank 0, or from a rank that failed because of it (its root cause)
        assert "rank 0" in str(e.value), str(e.value)
    assert big.cpu().eq(1).all(), "a failed op must leave the caller's tensor as it was"
    c = dev(torch.ones(2))
    dist.all_reduce(c)  # the default group was not touched
    assert c.cpu().tolist() == [float(world)] * 2


def device_worker(rank, world, port):
    ext = load_device()
    assert torch.accelerator.is_available() and torch.accelerator.current_accelerator().type == DEV
    assert DEV in dist.Backend.backend_capability["uccl"], dist.Backend.backend_capability["uccl"]
    U.init_uccl(rank, world, port)
    pg = dist.group.WORLD
    assert pg._get_backend(torch.device(DEV)) is not None  # registered for the device type
    check_ops(rank, world, ext)
    check_strided(rank, world, ext, direct=False)
    check_mixed(rank, world)
    check_copy_errors(rank, world, ext)
    dist.barrier()
    dist.destroy_process_group()


def test_staged_device_world_3(device_built):
    U.spawn(device_worker, 3, deadline_s=240)


def check_stream_order(rank, world, ext):
    """The op is ordered after the work queued on the current stream, as NCCL's is: a copy into
    the tensor still queued on a non-default stream (every device copy takes 30 ms here, six
    go before it) when all_reduce is called must be in the result. Ordered on the wrong stream,
    uccl reads the zeros that were there before (checked: with the stream argument left at 0
    this fails)."""
    from uccl import _core

    s = ext.new_stream()
    ext.set_stream(s)
    old = _core.sim_copy_speed()
    _core.sim_set_copy_speed(0, 30000)
    try:
        n = 1000
        pad, one = dev(torch.zeros(1)), torch.ones(1)
        for it in range(3):
            x = dev(torch.zeros(n))
            ext.synchronize()
            src = torch.full((n,), float(rank + it))
            for _ in range(6):  # keep stream s busy for 180 ms (torch.cuda._sleep's role)
                pad.copy_(one, non_blocking=True)
            x.copy_(src, non_blocking=True)  # queued on stream s behind them, lands ~210 ms later
            dist.all_reduce(x)
            want = float(sum(r + it for r in range(world)))
            got = x.cpu()
            assert got.eq(want).all(), f"iteration {it}: got {got[:4].tolist()}..., want {want}"
    finally:
        _core.sim_set_copy_speed(*old)
        ext.set_stream(0)


def check_wait_makes_stream_wait(rank, world, ext):
    """work.wait() makes the current stream wait and returns without blocking the host
    (ProcessGroupNCCL's semantics): rank 0 waits on an all_reduce the others join only after
    its wait returned; a host wait would deadlock until the timeout. The read queued after it
    on the stream sees the result."""
    x = dev(torch.full((1 << 16,), float(rank + 1)))
    ext.synchronize()
    want = float(sum(r + 1 for r in range(world)))
    running = U.all_reduce_while_peers_wait(rank, x, "direct/waiting")
    assert running in (None, True), "the others had not joined yet when wait() returned"
    got = x.cpu()  # on the stream, behind the wait
    assert got.eq(want).all(), f"got {got[:4].tolist()}..., want {want}"
    dist.barrier()


def check_barrier_covers_device_work(rank, world, ext):
    """barrier() synchronizes the current stream of the device the group used (ProcessGroupNCCL's
    barrier does): a copy queued there before it (behind 180 ms of other copies) has landed when
    barrier returns, seen from another stream, which is not ordered after it."""
    from uccl import _core

    s, other = ext.new_stream(), ext.new_stream()
    old = _core.sim_copy_speed()
    x, pad, one = dev(torch.zeros(1000)), dev(torch.zeros(1)), torch.ones(1)
    ext.synchronize()
    _core.sim_set_copy_speed(0, 30000)
    try:
        ext.set_stream(s)
        for _ in range(6):
            pad.copy_(one, non_blocking=True)
        src = torch.full((1000,), 7.0)
        x.copy_(src, non_blocking=True)
        dist.barrier()
        ext.set_stream(other)
        got = x.cpu()
        assert got.eq(7.0).all(), f"barrier returned before the current stream's work: {got[:4].tolist()}"
    finally:
        _core.sim_set_copy_speed(*old)
        ext.set_stream(0)


def check_graph_capture_refused(rank, world, ext):
    """A collective on a stream that is capturing a graph is refused, clearly, before anything is
    issued (uccl cannot be captured: its progress runs on the host); the group goes on."""
    x = dev(torch.ones(8))
    ext.set_capturing(True)
    try:
        with pytest.raises(NotImplementedError, match="capturing a graph"):
            dist.all_reduce(x)
    finally:
        ext.set_capturing(False)
    dist.all_reduce(x)
    assert x.cpu().eq(world).all()


def direct_worker(rank, world, port):
    ext = load_device()
    ext.use_uccl_sim_memory()
    U.init_uccl(rank, world, port)
    a = dev(torch.ones(4))
    assert uccl._core.memory_location(a.data_ptr())[0] == "sim", "uccltest memory should be uccl's simulated device"
    check_ops(rank, world, ext, direct=True)
    check_strided(rank, world, ext, direct=True)
    check_stream_order(rank, world, ext)
    check_wait_makes_stream_wait(rank, world, ext)
    check_graph_capture_refused(rank, world, ext)
    check_barrier_covers_device_work(rank, world, ext)
    check_mixed(rank, world)
    dist.barrier()
    dist.destroy_process_group()


def test_device_memory_uccl_owns_is_used_in_place_on_the_current_stream(device_built):
    """Issue 15, items 1 and 2, on the stand-in for CUDA: a torch device whose memory is uccl's
    simulated device (what CUDA memory is where the cuda backend is available). Every op works
    in place (torch copies nothing), ordered on the current stream, wait() makes the stream
    wait, and a job mixing CPU and device ranks works."""
    U.spawn(direct_worker, 3, deadline_s=300)


def soak_worker(rank, world, port, direct, seed):
    ext = load_device()
    if direct:
        ext.use_uccl_sim_memory()
    U.init_uccl(rank, world, port)
    import torch_soak
    checks = torch_soak.soak(rank, world, seed, 120, DEV)
    assert checks > 40, checks
    dist.destroy_process_group()


def soak_threads_worker(rank, world, port, direct, seed, n_threads):
    ext = load_device()
    if direct:
        ext.use_uccl_sim_memory()
    U.init_uccl(rank, world, port)
    import torch_soak
    checks = torch_soak.soak_threads(rank, world, seed, 60, DEV, n_threads)
    assert all(c > 15 for c in checks), checks
    dist.destroy_process_group()


@pytest.mark.parametrize("direct,seed,world", [(True, 4, 3), (False, 5, 2)], ids=["direct-w3", "staged-w2"])
def test_random_torch_soak_with_threads(device_built, direct, seed, world):
    """The torch soak on three threads per rank, each on a process group of its own (the default
    one and two new groups of every rank), as a trainer's data-parallel, pipeline and metrics
    threads would run (tests/torch/torch_soak.py soak_threads)."""
    U.spawn(soak_threads_worker, world, direct, seed, 3, deadline_s=300)


@pytest.mark.parametrize("direct,seed,world", [(False, 1, 3), (True, 2, 3), (True, 3, 4)],
                         ids=["staged-w3", "direct-w3", "direct-w4"])
def test_random_torch_soak_on_the_test_device(device_built, direct, seed, world):
    """120 torch.distributed calls drawn alike on every rank (tests/torch/torch_soak.py): every
    op and ReduceOp, dtypes down to int8 and bfloat16, counts 0 to 70001, each rank's tensors on
    the CPU or the test device per call, async batches of up to four waited for together; every
    result exact. staged: the device's own copies move its tensors (any vendor's path); direct:
    uccl's simulated device, in place on the current stream (CUDA's path)."""
    U.spawn(soak_worker, world, direct, seed, deadline_s=300)


def training_worker(rank, world, port, direct):
    ext = load_device()
    if direct:
        ext.use_uccl_sim_memory()
    U.init_uccl(rank, world, port)
    import test_torch_parallel as TP
    import test_torch_training as TT

    TT.check_on_device(rank, world, DEV)
    import batchnorm_kernels  # noqa: F401  (SyncBatchNorm's kernels for the test device)

    TT.check_sync_batchnorm(rank, world, DEV)
    for name in ("gpipe", "1f1b"):
        try:
            TP.check_pipelining(rank, world, name, DEV)
        except Exception as e:
            raise AssertionError(f"pipelining schedule {name} on rank {rank}, {DEV}: {e}") from e
    if world == 4:
        TP.check_device_mesh_2d(rank, world, DEV)
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.parametrize("direct,world", [(False, 4), (True, 2)], ids=["staged-w4", "direct-w2"])
def test_training_on_the_test_device_matches_cpu(device_built, direct, world):
    """What tests/gpu checks on CUDA, on a torch accelerator that is not CUDA: DDP (plain,
    allreduce and fp16 hooks, under Join with ZeroRedundancyOptimizer), FSDP2 and FSDP1 (its
    side streams and record_stream: the test device's) give the CPU's
    losses and parameters, SyncBatchNorm BatchNorm's on the whole batch, GPipe and 1F1B
    the single-process reference's, and (4 ranks) a dp x tp DeviceMesh with FSDP2 + tensor
    parallelism too. staged: torch's device copies move the tensors (any vendor's path; the
    receive buffers pipelining posts are leaves that require grad, written back below autograd);
    direct: uccl's simulated device in place, FSDP2's side streams and events being the
    simulated device's (the device guard's getStreamFromGlobalPool/record/block)."""
    U.spawn(training_worker, world, direct, deadline_s=300)


def checkpoint_worker(rank, world, port, direct, path, phase):
    ext = load_device()
    if direct:
        ext.use_uccl_sim_memory()
    U.init_uccl(rank, world, port)
    import test_torch_checkpoint as TC

    TC.check_functional(rank, world, DEV)
    if phase == "save":
        TC.check_save(rank, world, DEV, path)
    else:
        TC.check_load(rank, world, DEV, path)
    dist.destroy_process_group()


def test_checkpoint_and_functional_collectives_on_the_test_device(device_built, tmp_path):
    """torch.distributed.checkpoint on a torch accelerator that is not CUDA: an FSDP2 model and
    its Adam state saved by 3 ranks in place on uccl's simulated device (CUDA's path), loaded
    resharded by 2 ranks whose tensors torch's device copies move (any vendor's path); DCP's
    writer stages device tensors in the device's pinned host memory (the test device's pinned
    allocator). Functional and autograd collectives on both (test_torch_checkpoint.py has the
    checks)."""
    U.spawn(checkpoint_worker, 3, True, str(tmp_path), "save", deadline_s=300)
    U.spawn(checkpoint_worker, 2, False, str(tmp_path), "load", deadline_s=300)


def python_api_worker(rank, world, port, direct):
    """uccl.Communicator (the plain Python API, no torch.distributed) on the test device's tensors:
    uccl has no backend for that device, so they are staged through torch's own copies."""
    ext = load_device()
    if direct:
        ext.use_uccl_sim_memory()
    store = uccl.TcpStore("127.0.0.1", port, is_server=rank == 0, timeout=60)
    comm = uccl.Communicator(rank, world, store, timeout=60)
    total = float(sum(range(1, world + 1)))
    ext.reset_copy_stats()
    x = dev(torch.full((1000,), float(rank + 1)))
    assert comm.all_reduce(x) is x and x.device.type == DEV, x.device
    assert x.cpu().eq(total).all(), x[:4]
    stats = ext.copy_stats()
    assert stats["d2h_bytes"] >= 4000 and stats["h2d_bytes"] >= 4000, stats  # through the device's copies
    # A strided view in place; a leaf that requires grad; bfloat16; an async call.
    base = dev(torch.zeros(6, 4))
    view = base.t()
    view.copy_(dev(torch.full((4, 6), float(rank + 1))))
    comm.all_reduce(view, op="max")
    assert base.cpu().eq(float(world)).all(), base
    leaf = dev(torch.ones(5)).requires_grad_()
    comm.all_reduce(leaf)
    assert leaf.detach().cpu().eq(float(world)).all() and leaf.requires_grad, leaf
    h = dev(torch.full((9,), rank + 0.5, dtype=torch.bfloat16))
    comm.all_reduce(h)
    torch.testing.assert_close(h.cpu(), torch.full((9,), sum(r + 0.5 for r in range(world)), dtype=torch.bfloat16))
    w = comm.all_reduce(x, op="min", async_op=True)
    assert w.wait() is x and x.cpu().eq(total).all()
    # Outputs uccl allocates are on the input's device; an output on the device for a CPU input.
    g = comm.all_gather(dev(torch.tensor([rank, rank * 10], dtype=torch.int64)))
    assert g.device.type == DEV and g.cpu().tolist() == [v for r in range(world) for v in (r, r * 10)], g
    out = dev(torch.empty(world * 2))
    assert comm.all_gather(torch.tensor([rank, rank + 0.5]), out=out) is out
    assert out.cpu().tolist() == [v for r in range(world) for v in (r, r + 0.5)], out
    rs = comm.reduce_scatter(dev(torch.arange(world * 3, dtype=torch.float32)))
    assert rs.device.type == DEV and rs.cpu().tolist() == [world * v for v in range(rank * 3, rank * 3 + 3)], rs
    b = dev(torch.full((3,), float(rank)))
    comm.broadcast(b, root=world - 1)
    assert b.cpu().eq(float(world - 1)).all(), b
    a2a = comm.all_to_all(dev(torch.arange(world, dtype=torch.int32) + 100 * rank))
    assert a2a.cpu().tolist() == [100 * r + rank for r in range(world)], a2a
    if rank == 0:
        comm.send(dev(torch.arange(7, dtype=torch.float64)), peer=1)
    elif rank == 1:
        r = dev(torch.zeros(7, dtype=torch.float64))
        assert comm.recv(r, peer=0) is r and r.cpu().tolist() == list(range(7)), r
    check_python_api_stream(comm, rank, world)
    comm.barrier()
    del comm


def check_python_api_stream(comm, rank, world):
    """stream= a torch stream of the device: torch's copies in and out run there (the host op
    needs no stream), after the work queued on it: here a copy into the tensor still queued on
    that stream behind six others (over sim memory every copy takes 30 ms). What this shows is
    that such a stream is taken and the result is right; it cannot show the order itself: the
    simulated device's copies all go through one copy queue in the order they were issued, so
    a staging copy from another stream would come after that copy too (checked: stream=None
    passes as well). Only kernels jump that queue, and torch runs none on this device."""
    from uccl import _core

    s = torch.Stream(device=DEV)
    old = _core.sim_copy_speed()
    _core.sim_set_copy_speed(0, 30000)
    try:
        n = 1000
        y, pad, one = dev(torch.zeros(n)), dev(torch.zeros(1)), torch.ones(1)
        src = torch.full((n,), float(rank + 1))  # kept alive: the copy from it is still queued
        torch.accelerator.synchronize()
        with s:
            for _ in range(6):
                pad.copy_(one, non_blocking=True)
            y.copy_(src, non_blocking=True)
        assert comm.all_reduce(y, stream=s) is y
        s.synchronize()
        got = y.cpu()
        assert got.eq(float(sum(range(1, world + 1)))).all(), got[:4].tolist()
    finally:
        _core.sim_set_copy_speed(*old)


@pytest.mark.parametrize("direct", [False, True], ids=["staged", "sim-memory"])
def test_python_api_stages_tensors_of_a_device_without_a_backend(device_built, direct):
    """issue 14 item 7 for torch: any torch accelerator's tensors through uccl.Communicator, by
    torch's copies (counted on the device), results on the device, written back in place (strided
    views and leaves that require grad included), outputs uccl allocates on the input's device."""
    U.spawn(python_api_worker, 3, direct, deadline_s=120)
