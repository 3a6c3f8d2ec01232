"""Multi-dimensional parallelism on uccl: split_group, merge_remote_group, a 2-D DeviceMesh (dp x tp) with tensor
parallelism and FSDP2 over its dimensions, and torch.distributed.pipelining (GPipe, 1F1B with
a stage per rank; Interleaved1F1B and ZBVZeroBubble with two) trained for a few steps against a
single-process reference. One 4-rank spawn runs all."""
import pytest
import uccl

if not uccl.build_info().get("torch"):  # the build says so; never guess from imports
    pytest.skip("uccl built without the torch backend", allow_module_level=True)

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import torch_dist_util as U


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))


def check_device_mesh_2d(rank, world, device="cpu"):
    """On `device` (tests/gpu runs it on CUDA); the single-process reference stays on the CPU."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(device, (2, world // 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh["dp"], mesh["tp"]
    for sub in (dp, tp):
        assert dist.get_backend(sub.get_group()) == "uccl", dist.get_backend(sub.get_group())
    # Collectives along each mesh dimension reach exactly that dimension's ranks.
    t = torch.tensor([float(rank)], device=device)
    dist.all_reduce(t, group=tp.get_group())
    assert t.item() == sum(dist.get_process_group_ranks(tp.get_group())), (rank, t)
    t = torch.tensor([float(rank)], device=device)
    dist.all_reduce(t, group=dp.get_group())
    assert t.item() == sum(dist.get_process_group_ranks(dp.get_group())), (rank, t)

    # TP (column then row parallel) on "tp", FSDP2 on "dp": the 2-D recipe. Each dp replica
    # sees its own data; the reference is the same model on the concatenated batch.
    model = mlp()
    reference = copy.deepcopy(model)
    model.to(device)
    parallelize_module(model, tp, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=dp)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(3):
        xs = [torch.randn(4, 8, generator=torch.Generator().manual_seed(10 * step + r)) for r in range(2)]
        x = xs[dp.get_local_rank()].to(device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref_loss = torch.stack([reference(xi).pow(2).mean() for xi in xs]).mean()
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        both = torch.tensor([loss.item()], device=device)
        dist.all_reduce(both, op=dist.ReduceOp.AVG, group=dp.get_group())
        torch.testing.assert_close(both.item(), ref_loss.item(), rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.full_tensor().cpu(), q.detach(), rtol=1e-4, atol=1e-5)


def train_pipeline(rank, stage_ids, num_stages, make_schedule, last_holder, device, n_micro, steps, what):
    """Trains this rank's stages (`stage_ids` of a chain of `num_stages` Linear+Tanh layers) with
    the schedule `make_schedule(stages, n_micro)` builds, against the whole chain in one process
    on the CPU: the losses (on `last_holder`, the rank with the last stage) and every stage's
    parameters. Rank 0 holds the first stage."""
    from torch.distributed.pipelining import PipelineStage

    torch.manual_seed(0)
    layers = [nn.Linear(6, 6) for _ in range(num_stages)]
    full = nn.Sequential(*[m for l in copy.deepcopy(layers) for m in (l, nn.Tanh())])
    mods = [nn.Sequential(layers[i], nn.Tanh()).to(device) for i in stage_ids]
    stages = [PipelineStage(m, stage_index=i, num_stages=num_stages, device=torch.device(device))
              for m, i in zip(mods, stage_ids)]
    schedule = make_schedule(stages, n_micro)
    opt = torch.optim.SGD([p for m in mods for p in m.parameters()], lr=0.1)
    ref_opt = torch.optim.SGD(full.parameters(), lr=0.1)
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(2 * n_micro, 6, generator=g), torch.randn(2 * n_micro, 6, generator=g)
        opt.zero_grad()
        losses = []
        args = (x.to(device),) if rank == 0 else ()
        kwargs = dict(target=y.to(device), losses=losses) if rank == last_holder else {}
        schedule.step(*args, **kwargs)
        opt.step()
        # Reference: the same micro-batches; schedules scale gradients by 1/n_microbatches.
        ref_opt.zero_grad()
        ref_losses = [F.mse_loss(full(xm), ym) for xm, ym in zip(x.chunk(n_micro), y.chunk(n_micro))]
        torch.stack(ref_losses).mean().backward()
        ref_opt.step()
        if rank == last_holder:
            torch.testing.assert_close(torch.stack(losses).cpu(), torch.stack(ref_losses).detach(), rtol=1e-4,
                                       atol=1e-5, msg=lambda m: f"{what} step {step} losses: {m}")
    for mod, i in zip(mods, stage_ids):
        for got, ref in ((mod[0].weight, full[2 * i].weight), (mod[0].bias, full[2 * i].bias)):
            torch.testing.assert_close(got.cpu(), ref, rtol=1e-4, atol=1e-5, msg=lambda m: f"{what} stage {i}: {m}")


def check_pipelining(rank, world, schedule_name, device="cpu"):
    """A stage per rank, GPipe or 1F1B. The stages on `device` (tests/gpu runs it on CUDA)."""
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe

    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule_name]
    train_pipeline(rank, [rank], world, lambda stages, n: cls(stages[0], n_microbatches=n, loss_fn=F.mse_loss),
                   world - 1, device, n_micro=4, steps=3, what=schedule_name)


def check_multi_stage_pipelining(rank, world, schedule_name, device="cpu"):
    """Two stages per rank: interleaved placement (rank r holds stages r and r + world) for
    Interleaved1F1B, a V (r and 2 * world - 1 - r: the first and last stage on rank 0) for
    ZBVZeroBubble, whose zero-bubble backward splits input and weight gradients. More p2p at
    once than one stage per rank: each rank sends and receives for two stages per micro-batch."""
    from torch.distributed import pipelining as P

    n = 2 * world
    v_shape = schedule_name == "ScheduleZBVZeroBubble"
    mine = [rank, n - 1 - rank] if v_shape else [rank, rank + world]
    cls = getattr(P, schedule_name)
    train_pipeline(rank, mine, n, lambda stages, k: cls(stages, n_microbatches=k, loss_fn=F.mse_loss),
                   0 if v_shape else world - 1, device, n_micro=8, steps=2, what=schedule_name)


def check_split(rank, world):
    """ProcessGroup.split_group (what dist.split_group and DeviceMesh use when the default group
    is bound to an accelerator; called directly here since this build is CPU-only)."""
    import datetime

    pg = dist.group.WORLD
    assert pg._get_backend(torch.device("cpu")).supports_splitting
    mine = [0, 1] if rank < 2 else list(range(2, world))
    sub = pg.split_group(mine, timeout=datetime.timedelta(seconds=60), group_name=f"split_{mine[0]}")
    assert sub.size() == len(mine) and sub.rank() == mine.index(rank)
    t = torch.full((3,), float(rank))
    sub._get_backend(torch.device("cpu")).allreduce([t]).wait()
    assert t.tolist() == [float(sum(mine))] * 3, (rank, t)


def check_merge(rank, world):
    """ProcessGroup.merge_remote_group: two groups of two (made apart: split_group) merge into one
    of `world` over a store they share; torch numbers the callers through that store."""
    import datetime

    mine = [0, 1] if rank < 2 else list(range(2, world))
    part = dist.group.WORLD.split_group(mine, timeout=datetime.timedelta(seconds=60), group_name=f"part_{mine[0]}")
    store = dist.PrefixStore("merge_test", dist.distributed_c10d._get_default_store())
    merged = part.merge_remote_group(store, world, timeout=datetime.timedelta(seconds=60))
    b = merged._get_backend(torch.device("cpu"))
    assert merged.size() == world and b._get_backend_name() == "uccl", (merged.size(), b._get_backend_name())
    ranks = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    b.allgather([ranks], [torch.tensor([merged.rank()])]).wait()
    assert sorted(int(r) for r in ranks) == list(range(world)), ranks
    t = torch.full((5,), float(rank + 1))
    b.allreduce([t]).wait()
    assert t.tolist() == [float(sum(range(1, world + 1)))] * 5, (rank, t)


def parallel_worker(rank, world, port):
    U.init_uccl(rank, world, port)
    check_split(rank, world)
    check_merge(rank, world)
    check_device_mesh_2d(rank, world)
    for name in ("gpipe", "1f1b"):
        try:
            check_pipelining(rank, world, name)
        except Exception as e:
            raise AssertionError(f"pipelining schedule {name} on rank {rank}: {e}") from e
    for name in ("ScheduleInterleaved1F1B", "ScheduleZBVZeroBubble"):
        check_multi_stage_pipelining(rank, world, name)
    dist.barrier()
    dist.destroy_process_group()


def test_device_mesh_2d_and_pipelining():
    U.spawn(parallel_worker, 4)
