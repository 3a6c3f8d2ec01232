"""CuPy and JAX arrays on a GPU through the Python API (issue 14 item 7, issue 16 item 5), on a
machine with a GPU.

Run by tests/gpu/run.sh; each part is skipped, with the reason, where its library or a GPU is
missing, or uccl's cuda backend is unavailable. What is checked, on 2 ranks (one GPU each where
there are two, both on one GPU otherwise):
  * CuPy arrays are used in place on their device (they have ``__cuda_array_interface__``): the
    in-place collectives write into the caller's array, outputs uccl allocates are CuPy arrays on
    the input's device, values exact against numpy; ``stream=`` a CuPy stream orders the
    collective after kernels queued there (no host synchronisation in between);
  * JAX arrays on a GPU (immutable: read-only to CUDA) go through their library's host copy and
    come back as JAX arrays on the same GPU with the right values;
  * torch CUDA tensors: outputs uccl allocates (all_gather, reduce_scatter without out=) are on
    the input's GPU.
"""
import os

import numpy as np
import pytest

from harness import run_world

import uccl

_info = uccl.build_info()
if not _info.get("cuda_available"):
    pytest.skip(f"uccl's cuda backend is unavailable: {_info.get('cuda_unavailable_reason')}", allow_module_level=True)

# JAX preallocates most of a GPU's memory per process by default: with several ranks (and this
# process) on one GPU the second would run out.
NO_PREALLOC = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
os.environ.update(NO_PREALLOC)


def _cupy_or_skip():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("CuPy sees no GPU")
    except cupy.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"CuPy sees no GPU: {e}")
    return cupy


def cupy_body(ctx):
    import cupy as cp

    r, w, comm = ctx.rank, ctx.world, ctx.comm
    dev = r % cp.cuda.runtime.getDeviceCount()
    with cp.cuda.Device(dev):
        for n in (0, 7, 1023, (1 << 20) + 3):
            x = cp.arange(n, dtype=cp.float32) + r
            y = comm.all_reduce(x)
            cp.cuda.runtime.deviceSynchronize()
            ctx.check.equal(y is x, True, f"all_reduce n={n}: in place, the caller's array back")
            want = sum(np.arange(n, dtype=np.float32) + q for q in range(w))
            ctx.check.equal(cp.asnumpy(x), want, f"all_reduce n={n}")

            g = comm.all_gather(cp.full(n, r, dtype=cp.int32))
            cp.cuda.runtime.deviceSynchronize()
            ctx.check.equal(type(g).__name__ + "@" + str(g.device.id), f"ndarray@{dev}", f"all_gather n={n}: output kind")
            ctx.check.equal(cp.asnumpy(g), np.repeat(np.arange(w, dtype=np.int32), n), f"all_gather n={n}")

            s = comm.reduce_scatter(cp.full(n * w, r + 1, dtype=cp.float64))
            cp.cuda.runtime.deviceSynchronize()
            ctx.check.equal(type(s).__name__ + "@" + str(s.device.id), f"ndarray@{dev}", f"reduce_scatter n={n}: output kind")
            ctx.check.equal(cp.asnumpy(s), np.full(n, float(sum(q + 1 for q in range(w)))), f"reduce_scatter n={n}")

            b = cp.full(n, r, dtype=cp.float16)
            comm.broadcast(b, root=w - 1)
            cp.cuda.runtime.deviceSynchronize()
            ctx.check.equal(cp.asnumpy(b), np.full(n, w - 1, np.float16), f"broadcast n={n}")

        # Kernels queued on a stream write x; the collective is issued right after on that
        # stream, with no host synchronisation: it must see their result.
        st = cp.cuda.Stream(non_blocking=True)
        n = (1 << 22) + 5
        for it in range(4):
            with st:
                x = cp.zeros(n, dtype=cp.float32)
                for _ in range(200):  # keep the stream busy, so a missing wait shows
                    x += 0
                x += r + it
                comm.all_reduce(x, stream=st)
            st.synchronize()
            want = float(sum(q + it for q in range(w)))
            ctx.check.equal(cp.asnumpy(x[:16]), np.full(16, want, np.float32), f"stream iteration {it}: head")
            ctx.check.equal(cp.asnumpy(x[-16:]), np.full(16, want, np.float32), f"stream iteration {it}: tail")
    return comm.describe()


def test_cupy_arrays_in_place_on_their_device():
    _cupy_or_skip()
    run_world(2, "test_gpu_arrays:cupy_body", env=NO_PREALLOC, timeout=300)


def jax_body(ctx):
    import jax
    import jax.numpy as jnp

    r, w, comm = ctx.rank, ctx.world, ctx.comm
    gpus = jax.devices("gpu")
    gpu = gpus[r % len(gpus)]
    x = jax.device_put(jnp.arange(7, dtype=jnp.float32) + r, gpu)
    y = comm.all_reduce(x)
    ctx.check.equal(isinstance(y, jax.Array) and y.devices() == {gpu}, True, "all_reduce: a JAX array on the GPU")
    ctx.check.equal(np.asarray(y), sum(np.arange(7, dtype=np.float32) + q for q in range(w)), "all_reduce")
    ctx.check.equal(np.asarray(x), np.arange(7, dtype=np.float32) + r, "all_reduce: the immutable input unchanged")
    g = comm.all_gather(jax.device_put(jnp.full(3, r, dtype=jnp.int32), gpu))
    ctx.check.equal(isinstance(g, jax.Array) and g.devices() == {gpu}, True, "all_gather: a JAX array on the GPU")
    ctx.check.equal(np.asarray(g), np.repeat(np.arange(w, dtype=np.int32), 3), "all_gather")


def test_jax_gpu_arrays_through_their_library():
    jax = pytest.importorskip("jax")
    try:
        if not jax.devices("gpu"):
            pytest.skip("JAX sees no GPU")
    except RuntimeError as e:
        pytest.skip(f"JAX has no GPU backend here: {e}")
    run_world(2, "test_gpu_arrays:jax_body", env=NO_PREALLOC, timeout=300)


def torch_outputs_body(ctx):
    import torch

    r, w, comm = ctx.rank, ctx.world, ctx.comm
    dev = torch.device("cuda", r % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    g = comm.all_gather(torch.full((5,), float(r), device=dev))
    s = comm.reduce_scatter(torch.full((5 * w,), float(r + 1), device=dev))
    torch.cuda.synchronize()
    ctx.check.equal(str(g.device) + " " + str(s.device), f"{dev} {dev}", "outputs on the input's GPU")
    ctx.check.equal(g.cpu().numpy(), np.repeat(np.arange(w, dtype=np.float32), 5), "all_gather")
    ctx.check.equal(s.cpu().numpy(), np.full(5, float(sum(q + 1 for q in range(w))), np.float32), "reduce_scatter")


def test_torch_cuda_outputs_uccl_allocates_are_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    run_world(2, "test_gpu_arrays:torch_outputs_body", timeout=300)
