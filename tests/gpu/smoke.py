"""One rank of the GPU smoke test: the first things a CUDA job does, one step at a time, each
step printed (flushed) before and after, so that a crash names the step that caused it.

    python tests/gpu/smoke.py RANK WORLD PORT [host] (run.sh starts WORLD of them, rank 0 under
                                                     cuda-gdb where it exists, for a native stack)

With "host", the ranks never import torch nor touch a CUDA buffer (uccl itself may still look
for the driver): run first, it tells a crash of uccl's set-up on that machine (its NICs, RDMA
devices, sysfs) from one that needs CUDA.

Why: the first GPU run (benchmarks/results/gpu_h200_20261127) had every rank of every
multi-process GPU test die with SIGSEGV before reporting, host-only ranks included, and left
nothing else to go on. Steps: import torch and uccl; build_info; store and communicator;
all_reduce of a numpy array (host path, with CUDA loaded); set the device; all_reduce of CUDA
tensors (7 and 2^20+3 elements); broadcast; describe. Exit status 0 only if every result is right.
"""
import faulthandler
import os
import sys
import time

faulthandler.enable(all_threads=True)
RANK, WORLD, PORT = (int(a) for a in sys.argv[1:4])
HOST_ONLY = sys.argv[4:5] == ["host"]
T0 = time.monotonic()


def step(what):
    print(f"[rank {RANK} +{time.monotonic() - T0:6.2f}s] {what}", flush=True)


step(f"start: python {sys.version.split()[0]}, UCCL_CUDA_IPC={os.environ.get('UCCL_CUDA_IPC', '(unset)')}"
     f"{', host buffers only' if HOST_ONLY else ''}")
import numpy as np  # noqa: E402

if not HOST_ONLY:
    step("import torch")
    import torch  # noqa: E402
    step(f"torch {torch.__version__}, cuda available {torch.cuda.is_available()}")
step("import uccl")
import uccl  # noqa: E402

step(f"uccl from {os.path.dirname(uccl.__file__)}; build_info")
info = uccl.build_info()
step(f"cuda_available={info.get('cuda_available')} devices={info.get('cuda_devices')}; TcpStore")
store = uccl.TcpStore("127.0.0.1", PORT, is_server=(RANK == 0), timeout=60)
step("Communicator")
comm = uccl.Communicator(RANK, WORLD, store, timeout=60)
bad = 0


def check(got, want, what):
    global bad
    ok = np.array_equal(got, want)
    bad += not ok
    step(f"{what}: {'ok' if ok else f'WRONG: got {got[:4]}..., want {want[:4]}...'}")


x = np.full(7, RANK + 1, np.float32)
step("all_reduce numpy n=7")
comm.all_reduce(x)
check(x, np.full(7, WORLD * (WORLD + 1) / 2, np.float32), "all_reduce numpy")

if not HOST_ONLY:
    ngpu = torch.cuda.device_count()
    step(f"torch.cuda.set_device({RANK % ngpu})")
    torch.cuda.set_device(RANK % ngpu)
    for n in (7, (1 << 20) + 3):
        t = torch.full((n,), float(RANK + 1), device="cuda")
        step(f"all_reduce cuda n={n} (ptr {t.data_ptr():#x})")
        comm.all_reduce(t)
        step("torch.cuda.synchronize")
        torch.cuda.synchronize()
        check(t.cpu().numpy(), np.full(n, WORLD * (WORLD + 1) / 2, np.float32), f"all_reduce cuda n={n}")
    t = torch.full((1023,), float(RANK), device="cuda")
    step("broadcast cuda n=1023")
    comm.broadcast(t, root=WORLD - 1)
    torch.cuda.synchronize()
    check(t.cpu().numpy(), np.full(1023, float(WORLD - 1), np.float32), "broadcast cuda")
step(f"describe: {comm.describe()}")
comm.barrier()
step(f"done, {bad} wrong")
sys.stdout.flush()
os._exit(1 if bad else 0)
