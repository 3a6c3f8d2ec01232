"""GPU benchmarks for issue 14 (run by tests/gpu/run.sh; needs torch with CUDA and uccl's cuda backend).

In one run, 2 ranks (on GPUs 0 and 1 when there are two, else both on GPU 0):
  * uccl all_reduce busbw on CUDA tensors, staged through the host (UCCL_CUDA_IPC=off; through
    shared slots, and without them: UCCL_STAGED_SHARED=off; through the slots with the reduce
    kernel reading each landed chunk where it lies: UCCL_CUDA_REDUCE_FROM_HOST=1) and over
    CUDA IPC (UCCL_CUDA_IPC=on), 1 MiB .. 256 MiB float32; staged and IPC again with uccl's copies
    by kernel instead of the copy engines (UCCL_DEVICE_COPIES=kernel: what stream waits use);
  * torch.distributed with backend "uccl" on the same CUDA tensors (issue 15: in place, ordered
    on the current stream), and PyTorch Gloo's all_reduce (it copies to the host, reduces
    there, copies back);
  * the pinned PCIe copy bandwidth (host->device) measured by torch in the same run, and the
    staged path's bound on this machine: each rank copies every byte once device->host and once
    host->device, so two ranks on one GPU share its link and can reach half of it (busbw), one
    rank per GPU all of it;
  * uccl's all_reduce of CPU tensors over the same transport (shm): the bound of any path that
    moves the bytes through host memory with host copies;
  * the staged all_reduce of 16 and 64 MiB with UCCL_POST_AHEAD on and off, alternating runs
    (--ahead-rounds): the ring's next step posted while this one runs, fed chunk by chunk;
  * DDP training steps of one model on CUDA with the process group "uccl" and "gloo" (issue 15).
Goals: staged >= 10x Gloo at 64 MiB and >= 60% of the pinned PCIe bandwidth (issue 14); the
torch backend >= 10x Gloo at 64 MiB (issue 15). Each mode runs in its own processes with a time
limit; a mode whose ranks crash or overrun is reported as such and the others still run.
busbw = algbw * 2 (n-1)/n (nccl-tests' all_reduce factor). Writes OUT/bench_gpu.md and .json.
--modes and --sizes run a part (the others show as nan), --no-ddp skips the DDP steps; UCCL_*
variables in the environment reach every rank (UCCL_STAGED_CHUNK_BYTES, ...).
"""
import argparse
import json
import os
import socket
import sys
import time
from unittest import mock

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# The ranks are spawned processes: they read the sizes main() chose from the environment.
SIZES = [int(m) << 20 for m in os.environ.get("BENCH_GPU_SIZES_MIB", "1,4,16,64,256").split(",")]
MODES = ("staged", "staged-noslots", "staged-zc", "staged-kc", "ipc", "ipc-kc", "torch-uccl", "gloo", "host")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(fn, iters, sync):
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


def rank_main(rank, world, port, upath, mode, q):
    staged = mode in ("staged", "staged-noslots", "staged-zc", "staged-kc")
    # *-kc: uccl's own copies by kernel (base/device.h, device_copy_async), as under stream waits.
    os.environ["UCCL_DEVICE_COPIES"] = "kernel" if mode.endswith("-kc") else "auto"
    os.environ["UCCL_CUDA_IPC"] = "off" if staged else "on"
    if staged:
        os.environ["UCCL_STAGED"] = "on"  # the pipelined chunks, whatever the context's timing
        # staged-noslots: the chunks cross as bytes (D2H, a host copy between the processes, H2D)
        # instead of through shared slots (D2H into the slot the peer reads with its H2D).
        os.environ["UCCL_STAGED_SHARED"] = "off" if mode == "staged-noslots" else "on"
        # staged-zc: a reducing receive's kernel reads the chunk out of its (registered, mapped)
        # slot instead of a copy to a device temporary first (DeviceBackend::kernel_view_of_host).
        os.environ["UCCL_CUDA_REDUCE_FROM_HOST"] = "1" if mode == "staged-zc" else "0"
    ngpu = torch.cuda.device_count()
    dev = torch.device("cuda", rank % ngpu)
    torch.cuda.set_device(dev)
    import uccl
    torch.zeros(1, device=dev)  # a context before the communicator (UCCL_CUDA_IPC=auto sees it)
    store = uccl.TcpStore("127.0.0.1", port, is_server=(rank == 0), timeout=60)
    comm = uccl.Communicator(rank, world, store)
    res = {}
    torch_pg = mode in ("gloo", "torch-uccl")
    if torch_pg:
        dist.init_process_group("gloo" if mode == "gloo" else "uccl", init_method=f"file://{upath}", rank=rank,
                                world_size=world)
    for size in SIZES:
        # host: the same all_reduce on CPU tensors, the bound of any path through host memory.
        x = torch.ones(size // 4, device="cpu" if mode == "host" else dev)
        iters = max(3, min(50, (256 << 20) // size))
        if torch_pg:
            t = timed(lambda: dist.all_reduce(x), iters, torch.cuda.synchronize)
        else:
            t = timed(lambda: comm.all_reduce(x), iters, torch.cuda.synchronize)
        res[size] = t
    res["describe"] = comm.describe()  # after the operations: each peer's path and mode
    if torch_pg:
        dist.destroy_process_group()
    q.put((rank, res))
    comm.barrier()


def ddp_rank_main(rank, world, port, upath, mode, q):
    """DDP training steps of a 4-layer MLP (16.8 M parameters, 67 MB of float32 gradients) on
    CUDA, with the process group's backend "uccl" or "gloo": rank 0's median step time."""
    ngpu = torch.cuda.device_count()
    dev = torch.device("cuda", rank % ngpu)
    torch.cuda.set_device(dev)
    import uccl  # noqa: F401  (registers the backend)
    dist.init_process_group("uccl" if mode == "ddp-uccl" else "gloo", init_method=f"file://{upath}", rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(2048, 2048), torch.nn.ReLU()]
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers).to(dev), device_ids=[dev])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, 2048, device=dev)
    times = []
    for i in range(13):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= 3:  # warm-up: buckets built, connections made
            times.append(time.perf_counter() - t0)
    times.sort()
    q.put((rank, {"step_s": times[len(times) // 2], "describe": mode}))
    dist.barrier()
    dist.destroy_process_group()


def run(mode, world=2, limit_s=150, target=rank_main):
    """Rank 0's results, or a string saying why there are none (a rank crashed, the time ran out)."""
    import queue as queue_mod

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    upath = f"/tmp/uccl_bench_gloo_{os.getpid()}_{mode}"
    if os.path.exists(upath):
        os.remove(upath)
    procs = [ctx.Process(target=target, args=(r, world, port, upath, mode, q)) for r in range(world)]
    for p in procs:
        p.start()
    out, why = {}, None
    end = time.monotonic() + limit_s
    while len(out) < world and why is None:
        try:
            r, res = q.get(timeout=1)
            out[r] = res
        except queue_mod.Empty:
            dead = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode not in (None, 0) and i not in out]
            if dead:
                why = "rank %d exited with code %d" % dead[0]
            elif time.monotonic() > end:
                why = f"no result within {limit_s} s"
    for p in procs:
        p.join(10 if why is None else 1)
        if p.is_alive():
            p.kill()
    return out[0] if why is None else why


def pcie_bw():
    n = 256 << 20
    h = torch.empty(n, dtype=torch.uint8).pin_memory()
    d = torch.empty(n, dtype=torch.uint8, device="cuda")
    t = timed(lambda: d.copy_(h, non_blocking=True), 10, torch.cuda.synchronize)
    return n / t / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    ap.add_argument("--sizes", default=None, help="comma-separated MiB (default 1,4,16,64,256)")
    ap.add_argument("--no-ddp", action="store_true", help="skip the DDP step times")
    ap.add_argument("--ahead-rounds", type=int, default=1,
                    help="staged 16 and 64 MiB runs with UCCL_POST_AHEAD on and off, alternating (0: none)")
    ap.add_argument("--chunk-sweep", default="512K,2M,4M,8M/32M,8M,16M",
                    help="staged all_reduce of 64 MiB with these UCCL_STAGED_CHUNK_BYTES, each CHUNK or "
                         "CHUNK/BOUNCE (UCCL_STAGED_BOUNCE_BYTES; default auto: 4 chunks, at least 8M); '' skips")
    a = ap.parse_args()
    global SIZES
    if a.sizes:
        os.environ["BENCH_GPU_SIZES_MIB"] = a.sizes
        SIZES = [int(m) << 20 for m in a.sizes.split(",")]
    chosen = a.modes.split(",")
    if any(m not in MODES for m in chosen):
        ap.error(f"--modes: choose from {','.join(MODES)}")
    world = 2
    factor = 2 * (world - 1) / world
    pcie = pcie_bw()
    link_bound = pcie if torch.cuda.device_count() >= 2 else pcie / 2  # see the docstring
    modes = MODES
    results = {}
    for m in modes:
        results[m] = run(m, world) if m in chosen else "not run (--modes)"
        print(f"{m}: {results[m]}", flush=True)  # rank 0's seconds per size, or why none
    rows = []
    for size in SIZES:
        bw = {m: (size / results[m][size] / 1e9 * factor if isinstance(results[m], dict) else float("nan"))
              for m in modes}
        rows.append((size, bw))
    lines = [f"## all_reduce float32 on CUDA tensors, {world} ranks, {torch.cuda.device_count()} GPU(s) "
             f"({torch.cuda.get_device_name(0)})", "",
             f"pinned PCIe host->device copy: {pcie:.1f} GB/s (torch, same run); the staged path's bound "
             f"here: {link_bound:.1f} GB/s busbw ({'one rank per GPU' if link_bound == pcie else 'both ranks share one GPU link'})",
             "",
             "| size | uccl staged busbw (GB/s) | staged without shared slots | staged, zero-copy reduce | "
             "staged, copies by kernel | uccl IPC busbw | IPC, copies by kernel | torch 'uccl' busbw | "
             "Gloo busbw | staged / Gloo | torch 'uccl' / Gloo | staged / PCIe | staged / its bound | uccl on host tensors |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for size, bw in rows:
        lines.append(f"| {size >> 20} MiB | {bw['staged']:.2f} | {bw['staged-noslots']:.2f} | {bw['staged-zc']:.2f} | "
                     f"{bw['staged-kc']:.2f} | {bw['ipc']:.2f} | {bw['ipc-kc']:.2f} | "
                     f"{bw['torch-uccl']:.2f} | "
                     f"{bw['gloo']:.2f} | {bw['staged'] / bw['gloo']:.1f}x | {bw['torch-uccl'] / bw['gloo']:.1f}x | "
                     f"{100 * bw['staged'] / pcie:.0f}% | {100 * bw['staged'] / link_bound:.0f}% | {bw['host']:.2f} |")
    lines += [""] + [f"{m}: " + (f"`{results[m]['describe']}`" if isinstance(results[m], dict) else f"FAILED: {results[m]}")
                     for m in modes]
    # The staged pipeline's chunk: per-chunk costs against the overlap a smaller one gives.
    chunks = [c for c in a.chunk_sweep.split(",") if c]
    if chunks:
        lines += ["", "## staged all_reduce of 64 MiB by chunk size (UCCL_STAGED_CHUNK_BYTES / UCCL_STAGED_BOUNCE_BYTES)",
                  "", "| chunk / bounce | busbw (GB/s) | peer 1's path |", "|---|---|---|"]
        for c in chunks:
            chunk, _, bounce = c.partition("/")
            env = {"UCCL_STAGED_CHUNK_BYTES": chunk, "UCCL_STAGED_BOUNCE_BYTES": bounce or "auto",
                   "BENCH_GPU_SIZES_MIB": "64"}
            with mock.patch.dict(os.environ, env):  # the spawned ranks inherit it
                r = run("staged", world)
            if isinstance(r, dict):
                path = next((ln.strip() for ln in r["describe"].splitlines() if ln.strip().startswith("peer 1:")), "?")
                lines.append(f"| {chunk} / {bounce or 'auto'} | {(64 << 20) / r[64 << 20] / 1e9 * factor:.2f} | {path} |")
            else:
                lines.append(f"| {c} | FAILED: {r} | |")
    # Posting ahead (UCCL_POST_AHEAD, core/schedule_executor.h): the all-gather's first chunks
    # leave as the reduce-scatter's land, instead of after its last; alternating runs, same chunk.
    if a.ahead_rounds > 0:
        lines += ["", "## staged all_reduce with and without posting ahead (UCCL_POST_AHEAD), alternating runs", "",
                  "| size | on: busbw (GB/s) per run | off: busbw (GB/s) per run |", "|---|---|---|"]
        ab = {"on": [], "off": []}
        for i in range(a.ahead_rounds):
            for m in (("on", "off") if i % 2 == 0 else ("off", "on")):
                with mock.patch.dict(os.environ, {"UCCL_POST_AHEAD": m, "BENCH_GPU_SIZES_MIB": "16,64"}):
                    ab[m].append(run("staged", world))
        for size in (16 << 20, 64 << 20):
            cell = {m: ", ".join(f"{size / r[size] / 1e9 * factor:.2f}" if isinstance(r, dict) else f"FAILED: {r}"
                                 for r in ab[m]) for m in ab}
            lines.append(f"| {size >> 20} MiB | {cell['on']} | {cell['off']} |")
    # DDP step time, the same model and data with each backend (issue 15's DDP measure).
    ddp = {m: "not run (--no-ddp)" if a.no_ddp else run(m, world, target=ddp_rank_main) for m in ("ddp-uccl", "ddp-gloo")}
    print(f"ddp: {ddp}", flush=True)
    step = {m: (r["step_s"] * 1e3 if isinstance(r, dict) else float("nan")) for m, r in ddp.items()}
    lines += ["", f"## DDP step, 4 x Linear(2048, 2048) (67 MB of float32 gradients), batch 64, {world} ranks", "",
              "| backend | step (ms, median of 10) |", "|---|---|",
              f"| uccl | {step['ddp-uccl']:.2f} |", f"| Gloo | {step['ddp-gloo']:.2f} |",
              f"| Gloo / uccl | {step['ddp-gloo'] / step['ddp-uccl']:.1f}x |"]
    lines += [f"{m}: FAILED: {r}" for m, r in ddp.items() if not isinstance(r, dict)]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(a.out, "bench_gpu.md"), "w") as f:
        f.write(text)
    with open(os.path.join(a.out, "bench_gpu.json"), "w") as f:
        json.dump({"pcie_h2d_gbps": pcie, "staged_bound_gbps": link_bound, "busbw_gbps": {str(s): bw for s, bw in rows}, "ddp_step_ms": step,
                   "failed": {m: r for m, r in list(results.items()) + list(ddp.items()) if not isinstance(r, dict)}},
                  f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
