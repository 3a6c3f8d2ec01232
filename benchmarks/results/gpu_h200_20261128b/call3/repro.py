"""The eager-loading hang, small (2026-11-28 evening): 2 ranks on GPU 0, signal waits
(CUDA_MODULE_LOADING=EAGER), each op's wait() queued on the current stream (the legacy default
stream, or a side stream), a fresh allocation size per broadcast (a new IPC handle). On a hang
(deadline) the harness prints both ranks' native stacks (cuda-gdb) and their Python stacks."""
import contextlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in ("tests", "tests/torch"):
    sys.path.insert(0, os.path.join(ROOT, p))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch_dist_util as U  # noqa: E402
import uccl  # noqa: E402


def worker(rank, world, port, variant):
    torch.cuda.set_device(0)
    print(f"rank {rank} {variant}: stream waits by {uccl.stream_wait_mode('cuda')}", flush=True)
    U.init_uccl(rank, world, port, timeout_s=300)
    d = torch.device("cuda", 0)
    ctx = torch.cuda.stream(torch.cuda.Stream()) if variant.startswith("side") else contextlib.nullcontext()
    with ctx:
        for i in range(3):
            a = torch.full((1 << 20,), float(rank + 1), device=d)
            dist.all_reduce(a)
            print(f"rank {rank} step {i}: all_reduce queued", flush=True)
            b = torch.ones(8)
            dist.all_reduce(b)
            assert a.cpu().eq(3).all() and b.eq(2).all()
            print(f"rank {rank} step {i}: all_reduce ok", flush=True)
            c = torch.full((4099 + 64 * i,), float(rank), device=d)
            dist.broadcast(c, src=1)
            assert c.cpu().eq(1).all()
            print(f"rank {rank} step {i}: broadcast ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    variant, deadline = sys.argv[1], int(sys.argv[2])
    U.spawn(worker, 2, variant, deadline_s=deadline)
    print(f"variant {variant}: passed", flush=True)
