"""Diagnosis of test_torch_backend_on_cuda_with_eager_module_loading's hang (2026-11-28 evening):
one variant per run; on a hang (deadline) the harness prints both ranks' native stacks."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in ("tests", "tests/torch", "tests/gpu"):
    sys.path.insert(0, os.path.join(ROOT, p))
import torch  # noqa: E402
import torch_dist_util as U  # noqa: E402
import test_gpu_torch as G  # noqa: E402


def worker(rank, world, port, variant):
    if variant == "sidestream":
        s = torch.cuda.Stream(device=0)
        with torch.cuda.stream(s):
            G.worker(rank, world, port, True, True)
    else:
        G.worker(rank, world, port, True, variant != "host")


if __name__ == "__main__":
    variant, deadline = sys.argv[1], int(sys.argv[2])
    U.spawn(worker, 2, variant, deadline_s=deadline)
    print(f"variant {variant}: passed", flush=True)
