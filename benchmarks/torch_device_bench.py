"""The torch backend's two device paths against CPU tensors, measured in one run.

    python benchmarks/torch_device_bench.py [--ranks 2] [--sizes 1M,16M,64M] [--reps 10]

Each rank holds a tensor of a PrivateUse1 test device (tests/torch/uccl_test_device.cpp):
  * staged: host memory behind the device's own copy functions; uccl cannot use it, so the
    backend copies it to the host before the all_reduce and back after (torch's copies);
  * direct: uccl's simulated device (unthrottled); uccl owns it, so the backend hands it over in
    place, ordered on the current stream (what CUDA tensors get where the cuda backend exists);
  * cpu: plain CPU tensors (the baseline).
Prints the median time per all_reduce (dist.all_reduce + reading one element back to the host,
which waits for the result) and each path's time over CPU's. Two ranks on this 2-core machine.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "torch"))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import torch_dist_util as U  # noqa: E402


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def worker(rank, world, port, sizes, reps, out_path):
    import test_torch_device as T

    mode_results = {}
    ext = T.load_device()
    U.init_uccl(rank, world, port, timeout_s=300)
    for mode in ("cpu", "staged", "direct"):
        if mode == "direct":
            ext.use_uccl_sim_memory()  # tensors made from now on live on uccl's simulated device
        for size in sizes:
            n = size // 4
            x = torch.ones(n) if mode == "cpu" else torch.ones(n).to(T.DEV)
            times = []
            for i in range(reps + 2):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(x)
                x[:1].cpu()  # the result is there (a device op returns before it is)
                if i >= 2:
                    times.append(time.perf_counter() - t0)
            mode_results[(mode, size)] = statistics.median(times)
    if rank == 0:
        with open(out_path, "w") as f:
            for (mode, size), t in mode_results.items():
                f.write(f"{mode} {size} {t}\n")
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--sizes", default="1M,16M,64M")
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    import test_torch_device as T

    T.build_extension()  # once, here, so that the ranks only load it
    out = f"/tmp/uccl_torch_device_bench_{os.getpid()}.txt"
    U.spawn(worker, a.ranks, sizes, a.reps, out, deadline_s=1800)
    res = {}
    with open(out) as f:
        for line in f:
            mode, size, t = line.split()
            res[(mode, int(size))] = float(t)
    os.unlink(out)
    print(f"all_reduce, {a.ranks} ranks, median of {a.reps}; time in ms (ratio to CPU tensors)")
    print("| size | cpu | staged | direct |")
    print("|---|---|---|---|")
    for s in sizes:
        c = res[("cpu", s)]
        cells = [f"{res[(m, s)] * 1e3:.2f} ({res[(m, s)] / c:.2f}x)" for m in ("staged", "direct")]
        print(f"| {s >> 20} MiB | {c * 1e3:.2f} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
