"""Collectives on CUDA buffers (torch CUDA tensors), on a machine with a GPU.

Run by tests/gpu/run.sh (or `python -m pytest tests/gpu` with the CUDA build installed).
Skipped, with the reason, where torch has no CUDA or uccl's cuda backend is unavailable.

Values are small integers (exact in every dtype and in any summation order), so each result is
compared bit for bit with numpy. Scenarios:
  * every collective x dtype x op, counts 0, 1, 7, 1023, 2^20+3, in place and out of place,
    worlds 2 and 3, through CUDA IPC (one host: the default) and staged through the host
    (UCCL_CUDA_IPC=off: the staged path over shm, pipelined in chunks through shared slots, the
    same with the reduce kernel reading the slots (UCCL_CUDA_REDUCE_FROM_HOST=1), and whole
    messages);
  * several ranks on one GPU (world 4, all on cuda:0; NCCL refuses this);
  * mixed ranks: even ranks pass CUDA tensors, odd ranks numpy arrays;
  * a kernel writes the buffer on the current stream right before the collective (no host
    synchronisation in between: the `stream=` ordering must cover it);
  * Work.wait(stream=) makes another stream wait: without blocking the host with
    UCCL_STREAM_WAIT=signal (cuStreamWaitValue32) and kernel (a polling kernel), by the host with
    auto (CUDA: cuda_signals.cc's signal_waits_safe).
"""
import numpy as np
import pytest

from harness import run_world

torch = pytest.importorskip("torch")
import uccl  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch", allow_module_level=True)
_info = uccl.build_info()
if not _info.get("cuda_available"):
    pytest.skip(f"uccl's cuda backend is unavailable: {_info.get('cuda_unavailable_reason')}", allow_module_level=True)

COUNTS = [0, 1, 7, 1023, (1 << 20) + 3]
DTYPES = ["float32", "float16", "bfloat16", "int32", "int64", "uint8", "int8", "float64"]
OPS = ["sum", "prod", "min", "max"]
NGPU = torch.cuda.device_count()


def _tdtype(name):
    return getattr(torch, name)


def _values(rank, count, dtype, salt=0):
    """Small integers: exact sums/products for worlds <= 5 in every dtype."""
    rng = np.random.default_rng(1000 * rank + 17 * count + salt)
    lo, hi = (0, 4) if dtype in ("uint8",) else (-3, 4)
    return rng.integers(lo, hi, size=count).astype(np.float64)


def _ref(vals, op):
    a = np.stack(vals)
    return {"sum": a.sum(0), "prod": a.prod(0), "min": a.min(0), "max": a.max(0)}[op]


def _to_numpy(t):
    if isinstance(t, np.ndarray):
        return t
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _want(values, dtype):
    t = torch.tensor(values, dtype=torch.float64).to(_tdtype(dtype))
    return _to_numpy(t)


def _device(rank, one_gpu):
    return torch.device("cuda", 0 if one_gpu else rank % NGPU)


def sweep(ctx, one_gpu, counts, dtypes):
    torch.cuda.set_device(_device(ctx.rank, one_gpu))
    dev = _device(ctx.rank, one_gpu)
    comm, r, w = ctx.comm, ctx.rank, ctx.world
    for dtype in dtypes:
        td = _tdtype(dtype)
        for n in counts:
            vals = [_values(q, n, dtype) for q in range(w)]
            for op in OPS:
                x = torch.tensor(vals[r], dtype=torch.float64).to(td).to(dev)
                comm.all_reduce(x, op=op)
                torch.cuda.synchronize()
                ctx.check.equal(_to_numpy(x), _want(_ref(vals, op), dtype), f"all_reduce {op} {dtype} n={n}")
                x = torch.tensor(vals[r], dtype=torch.float64).to(td).to(dev)
                out = torch.empty_like(x)
                comm.reduce(x, out=out, op=op, root=w - 1)
                torch.cuda.synchronize()
                if r == w - 1:
                    ctx.check.equal(_to_numpy(out), _want(_ref(vals, op), dtype), f"reduce {op} {dtype} n={n}")
            x = torch.tensor(vals[r], dtype=torch.float64).to(td).to(dev)
            comm.broadcast(x, root=0)
            torch.cuda.synchronize()
            ctx.check.equal(_to_numpy(x), _want(vals[0], dtype), f"broadcast {dtype} n={n}")
            x = torch.tensor(vals[r], dtype=torch.float64).to(td).to(dev)
            out = torch.empty(n * w, dtype=td, device=dev)
            comm.all_gather(x, out=out)
            torch.cuda.synchronize()
            ctx.check.equal(_to_numpy(out), _want(np.concatenate(vals), dtype), f"all_gather {dtype} n={n}")
            big = [_values(q, n * w, dtype, salt=1) for q in range(w)]
            x = torch.tensor(big[r], dtype=torch.float64).to(td).to(dev)
            out = torch.empty(n, dtype=td, device=dev)
            comm.reduce_scatter(x, out=out, op="sum")
            torch.cuda.synchronize()
            ctx.check.equal(_to_numpy(out), _want(_ref(big, "sum")[r * n:(r + 1) * n], dtype),
                            f"reduce_scatter {dtype} n={n}")
            out = torch.empty(n * w, dtype=td, device=dev)
            comm.all_to_all(x, out=out)
            torch.cuda.synchronize()
            want = np.concatenate([big[q][r * n:(r + 1) * n] for q in range(w)])
            ctx.check.equal(_to_numpy(out), _want(want, dtype), f"all_to_all {dtype} n={n}")
    # point to point around a ring
    x = torch.full((1023,), float(r), device=dev)
    y = torch.empty(1023, device=dev)
    nxt, prv = (r + 1) % w, (r - 1) % w
    if r % 2 == 0:
        comm.send(x, nxt)
        comm.recv(y, prv)
    else:
        comm.recv(y, prv)
        comm.send(x, nxt)
    torch.cuda.synchronize()
    ctx.check.equal(_to_numpy(y), np.full(1023, float(prv), np.float32), "send/recv ring")
    return comm.describe()


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("path", ["ipc", "staged", "staged-zc", "staged-whole"])
def test_every_collective_on_cuda(world, path):
    # staged: the pipelined chunks (UCCL_STAGED=auto: the harness makes the communicator before
    # the ranks touch CUDA, and the pairs connect at the first operation, on CUDA tensors: the
    # offers are made then, core/handshake.h); staged-zc: the same with reducing receives read
    # by the kernel out of their mapped slots (UCCL_CUDA_REDUCE_FROM_HOST=1); staged-whole:
    # whole messages through one bounce buffer each (UCCL_STAGED=off).
    staged = {"UCCL_CUDA_IPC": "off"}
    env = {"ipc": {"UCCL_CUDA_IPC": "on"}, "staged": staged, "staged-zc": dict(staged, UCCL_CUDA_REDUCE_FROM_HOST="1"),
           "staged-whole": {"UCCL_CUDA_IPC": "off", "UCCL_STAGED": "off"}}[path]
    desc = run_world(world, "test_gpu_collectives:sweep", args=(False, COUNTS, DTYPES), env=env, timeout=900)
    # The path each peer took (describe()'s "peer N: ..." lines; the topology part may name
    # cuda_ipc as unavailable, so only those lines count).
    peers = [ln for ln in desc[0].splitlines() if ln.strip().startswith("peer ")]
    assert peers, desc[0]
    if path == "ipc":
        assert all("cuda_ipc" in ln for ln in peers), desc[0]
    else:
        # The pipelined chunks on one host go through shared slots (staged_slots.h): registered
        # with cudaHostRegister, the device copies read and write them directly.
        # (no stream waits here, so nothing defers the registration). The chunk is the cuda
        # backend's staging_chunk_bytes (UCCL_STAGED_CHUNK_BYTES=auto follows the device).
        chunk = next(b["staging_chunk_bytes"] for b in uccl.build_info()["device_backends"] if b["name"] == "cuda")
        assert chunk > 0
        mode = (f"chunks of {chunk} bytes, shared slots: ours pinned, the peer's pinned" if path != "staged-whole"
                else "whole messages")
        assert all(mode in ln and "cuda_ipc" not in ln for ln in peers), desc[0]


def test_several_ranks_on_one_gpu():
    desc = run_world(4, "test_gpu_collectives:sweep", args=(True, [1, 1023, (1 << 20) + 3], ["float32", "bfloat16"]),
                     env={"UCCL_CUDA_IPC": "on"}, timeout=600)
    assert "cuda_ipc" in desc[0], desc[0]


def mixed(ctx):
    """Even ranks: CUDA tensors; odd ranks: numpy arrays."""
    r, w = ctx.rank, ctx.world
    cuda = r % 2 == 0
    if cuda:
        torch.cuda.set_device(r % NGPU)
    for n in [0, 7, 1023, (1 << 20) + 3]:
        vals = [_values(q, n, "float32") for q in range(w)]
        x = vals[r].astype(np.float32)
        if cuda:
            x = torch.from_numpy(x).cuda()
        ctx.comm.all_reduce(x, op="sum")
        if cuda:
            torch.cuda.synchronize()
        ctx.check.equal(_to_numpy(x), _ref(vals, "sum").astype(np.float32), f"mixed all_reduce n={n}")
        out = torch.empty(n * w, device="cuda") if cuda else np.empty(n * w, np.float32)
        x = vals[r].astype(np.float32)
        if cuda:
            x = torch.from_numpy(x).cuda()
        ctx.comm.all_gather(x, out=out)
        if cuda:
            torch.cuda.synchronize()
        ctx.check.equal(_to_numpy(out), np.concatenate(vals).astype(np.float32), f"mixed all_gather n={n}")


@pytest.mark.parametrize("ipc", ["on", "off"])
def test_mixed_cuda_and_host_ranks(ipc):
    run_world(4, "test_gpu_collectives:mixed", env={"UCCL_CUDA_IPC": ipc}, timeout=600)


def kernel_then_collective(ctx):
    """A kernel on the current stream writes x; the collective is issued right after, with no
    host synchronisation: it must see the kernel's result (stream= ordering)."""
    r, w = ctx.rank, ctx.world
    torch.cuda.set_device(r % NGPU)
    s = torch.cuda.Stream()
    n = (1 << 22) + 5
    for it in range(5):
        with torch.cuda.stream(s):
            x = torch.zeros(n, device="cuda")
            torch.cuda._sleep(2_000_000)  # keep the stream busy so a missing wait shows
            x.fill_(float(r + it))
            ctx.comm.all_reduce(x, op="sum", stream=s)
        s.synchronize()
        want = float(sum(q + it for q in range(w)))
        ctx.check.equal(_to_numpy(x[:16]), np.full(16, want, np.float32), f"iteration {it}: head")
        ctx.check.equal(_to_numpy(x[-16:]), np.full(16, want, np.float32), f"iteration {it}: tail")


@pytest.mark.parametrize("ipc", ["on", "off"])
def test_kernel_writes_buffer_right_before_collective(ipc):
    run_world(2, "test_gpu_collectives:kernel_then_collective", env={"UCCL_CUDA_IPC": ipc}, timeout=300)


def async_free(ctx):
    """The input is dropped right after an async collective: uccl must keep it alive."""
    torch.cuda.set_device(ctx.rank % NGPU)
    n = 1 << 22
    works = []
    for i in range(4):
        x = torch.full((n,), float(ctx.rank + i), device="cuda")
        works.append((i, x.data_ptr(), ctx.comm.all_reduce(x, op="sum", async_op=True)))
        del x
    for i, _, wk in works:
        res = wk.wait()
        if res is not None:
            torch.cuda.synchronize()
            want = float(sum(q + i for q in range(ctx.world)))
            ctx.check.equal(_to_numpy(res[:8]), np.full(8, want, np.float32), f"async {i}")


def test_input_dropped_after_async_collective():
    run_world(2, "test_gpu_collectives:async_free", env={"UCCL_CUDA_IPC": "on"}, timeout=300)


def wait_on_stream(ctx):
    """Work.wait(stream=s2) makes s2 wait: a kernel queued on s2 afterwards reads the reduced
    values (a stream that did not wait would read rank 0's own input). With signal waits it returns
    without blocking the host: rank 1 joins only after rank 0's wait returned (a blocking wait
    would deadlock). With host waits (auto on CUDA) it returns once the
    operation is done. The kernel queued behind the wait is launched once before: under signal
    waits its lazy load would wait for s2 under the context's lock (cpp/base/device.h)."""
    torch.cuda.set_device(ctx.rank % NGPU)
    x = torch.full((1 << 20,), float(ctx.rank + 1), device="cuda")
    y = torch.empty_like(x)
    s2 = torch.cuda.Stream()
    with torch.cuda.stream(s2):
        torch.mul(x, 1, out=y)
    torch.cuda.synchronize()
    mode = uccl.stream_wait_mode("cuda")
    if ctx.rank == 1:
        if mode in ("signal", "kernel"):
            ctx.store.get("waiting", 60)
        ctx.comm.all_reduce(x, op="sum")
        return mode
    w = ctx.comm.all_reduce(x, op="sum", async_op=True)
    w.wait(stream=s2)
    ctx.store.set("waiting", b"1")
    with torch.cuda.stream(s2):
        torch.mul(x, 1, out=y)  # queued behind the wait
    s2.synchronize()
    w.wait()
    ctx.check.equal(_to_numpy(y[:8]), np.full(8, 3.0, np.float32), "after wait(stream=)")
    return mode


@pytest.mark.parametrize("ipc", ["on", "off"])
@pytest.mark.parametrize("wait", ["auto", "signal", "kernel"])
def test_work_wait_makes_a_stream_wait(ipc, wait):
    modes = run_world(2, "test_gpu_collectives:wait_on_stream", env={"UCCL_CUDA_IPC": ipc, "UCCL_STREAM_WAIT": wait},
                      timeout=300)
    want = "host (CUDA cannot see" if wait == "auto" else wait
    assert all(m.startswith(want) for m in modes), modes


def test_build_info_reports_cuda():
    info = uccl.build_info()
    assert info["cuda"] and info["cuda_available"] and info["cuda_devices"] == NGPU, info
