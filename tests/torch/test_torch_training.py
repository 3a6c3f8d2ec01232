"""Real training on the uccl backend: DDP (plain, with comm hooks that chain on the Work's
Future, and over uneven inputs under Join with ZeroRedundancyOptimizer), FSDP2 (fully_shard, also
with bf16 mixed precision) and FSDP1 (FullyShardedDataParallel) give the same losses and
parameters as gloo from the same seed.

One 3-rank spawn (3 makes FSDP shards uneven) runs everything side by side in the same processes."""
import pytest
import uccl

if not uccl.build_info().get("torch"):  # the build says so; never guess from imports
    pytest.skip("uccl built without the torch backend", allow_module_level=True)

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.distributed.algorithms.join import Join
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

import torch_dist_util as U

STEPS = 4


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 17), nn.ReLU(), nn.Linear(17, 9), nn.ReLU(), nn.Linear(9, 4))


def batch(rank, step, device="cpu"):
    g = torch.Generator().manual_seed(100 + 10 * step + rank)
    return torch.randn(6, 8, generator=g).to(device), torch.randn(6, 4, generator=g).to(device)


def train(model, rank, steps=STEPS, device="cpu", opt=None):
    """Losses of `steps` steps (SGD unless `opt` is given) on this rank's batches (moved to
    `device`, where the model is)."""
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        x, y = batch(rank, step, device)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def params_of(module):
    return [p.detach().clone() for p in module.parameters()]


def assert_params_close(a, b, what, rtol=1e-5, atol=1e-6):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        torch.testing.assert_close(x, y, rtol=rtol, atol=atol, msg=lambda m: f"{what}, parameter {i}: {m}")


def ddp_device_ids(dev):
    """DDP's device_ids for a model on `dev` (CUDA only; None elsewhere)."""
    return [dev.index] if dev.type == "cuda" else None


def shard_layers(model, mesh, **policies):
    """FSDP2 the usual way: each Linear, then the root (`policies`: mp_policy, offload_policy)."""
    from torch.distributed.fsdp import fully_shard

    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, **policies)
    fully_shard(model, mesh=mesh, **policies)


def assert_same_on_all_ranks(params, group, what):
    for i, p in enumerate(params):
        ref = p.clone()
        dist.broadcast(ref, group_src=0, group=group)
        torch.testing.assert_close(p, ref, msg=lambda m: f"{what}: parameter {i} differs from rank 0: {m}")


def uneven_zero_run(rank, group, dev="cpu"):
    """DDP over uneven inputs (rank r has 3 + 2r batches) under Join, whose shadow collectives
    stand in for the ranks that ran out, with ZeroRedundancyOptimizer (Adam, each rank owns a
    shard of the state and broadcasts its updated parameters) and gradient_as_bucket_view; then
    the optimizer state consolidated on rank 0. Returns (losses, parameters, rank 0's exp_avg)."""
    dev = torch.device(dev)
    model = make_model().to(dev)
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.0005, gradient_as_bucket_view=True,
              device_ids=ddp_device_ids(dev))
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, process_group=group, lr=0.01)
    with Join([ddp, opt]):
        losses = train(ddp, rank, steps=3 + 2 * rank, device=dev, opt=opt)
    opt.consolidate_state_dict(to=0)
    moments = None
    if rank == 0:
        state = opt.state_dict()["state"]
        assert len(state) == len(list(model.parameters())), f"consolidated state of {len(state)} parameters"
        moments = [state[i]["exp_avg"].cpu() for i in sorted(state)]
    return losses, [p.detach().cpu() for p in model.parameters()], moments


def fsdp1_run(rank, group, strategy, dev="cpu"):
    """FSDP1 (FullyShardedDataParallel, each Linear wrapped) with a ShardingStrategy by name: its
    side streams, record_stream and flat-parameter all_gather / reduce_scatter. (losses, full
    parameters)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    dev = torch.device(dev)
    model = FSDP(make_model().to(dev), process_group=group, sharding_strategy=getattr(ShardingStrategy, strategy),
                 device_id=dev, auto_wrap_policy=ModuleWrapPolicy({nn.Linear}), use_orig_params=True)
    losses = train(model, rank, device=dev)
    with FSDP.summon_full_params(model):
        return losses, [p.detach().cpu().clone() for p in model.parameters()]


def check_ddp(rank, world, g):
    runs = {}
    for name, group in (("uccl", dist.group.WORLD), ("gloo", g)):
        model = make_model()
        # A tiny bucket cap makes several allreduce buckets per step (several in-flight works).
        ddp = DDP(model, process_group=group, bucket_cap_mb=0.0005)
        runs[name] = (train(ddp, rank), params_of(model))
    torch.testing.assert_close(runs["uccl"][0], runs["gloo"][0], rtol=1e-5, atol=1e-6)
    assert_params_close(runs["uccl"][1], runs["gloo"][1], "DDP uccl vs gloo")
    assert_same_on_all_ranks(runs["uccl"][1], dist.group.WORLD, "DDP uccl")

    # Comm hooks build on work.get_future(): allreduce_hook divides in .then(); the fp16 hook
    # casts around it (torch allows its bf16 hook only with NCCL/XCCL). Same result as the plain
    # run (fp16 within its precision).
    for hook, tol in ((default_hooks.allreduce_hook, 1e-5), (default_hooks.fp16_compress_hook, 1e-2)):
        model = make_model()
        ddp = DDP(model, process_group=dist.group.WORLD, bucket_cap_mb=0.0005)
        ddp.register_comm_hook(dist.group.WORLD, hook)
        losses = train(ddp, rank)
        torch.testing.assert_close(losses, runs["gloo"][0], rtol=tol, atol=tol)
        assert_same_on_all_ranks(params_of(model), dist.group.WORLD, f"DDP {hook.__name__}")

    # PowerSGD launches further allreduces from inside Future callbacks: they must not run on
    # uccl's progress thread (they would deadlock there).
    model = make_model()
    ddp = DDP(model, process_group=dist.group.WORLD)
    state = powerSGD_hook.PowerSGDState(process_group=dist.group.WORLD, matrix_approximation_rank=1,
                                        start_powerSGD_iter=2, min_compression_rate=0.1)
    ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    losses = train(ddp, rank, steps=5)
    assert all(torch.isfinite(torch.tensor(losses))), losses
    assert_same_on_all_ranks(params_of(model), dist.group.WORLD, "DDP powerSGD")

    # Uneven inputs under Join, with ZeroRedundancyOptimizer: uccl as gloo.
    ours, gloo = uneven_zero_run(rank, dist.group.WORLD), uneven_zero_run(rank, g)
    torch.testing.assert_close(ours[0], gloo[0], rtol=1e-5, atol=1e-6)
    assert_params_close(ours[1], gloo[1], "DDP + Join + ZeroRedundancyOptimizer uccl vs gloo")
    if rank == 0:
        assert_params_close(ours[2], gloo[2], "ZeroRedundancyOptimizer's consolidated exp_avg uccl vs gloo")


def fsdp2_run(rank, group, dev="cpu", **policies):
    """FSDP2 (each Linear and the root fully_shard'ed; `policies`: mp_policy, offload_policy).
    (losses, full parameters on the CPU)."""
    from torch.distributed.device_mesh import DeviceMesh

    dev = torch.device(dev)
    model = make_model().to(dev)
    shard_layers(model, DeviceMesh.from_group(group, dev.type), **policies)
    losses = train(model, rank, device=dev)
    return losses, [p.full_tensor().detach().cpu().clone() for p in model.parameters()]


def bf16_mixed_precision():
    """bfloat16 parameters for compute (bf16 all_gathers), float32 gradient reduce_scatters."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def check_fsdp2(rank, world, g):
    runs = {name: fsdp2_run(rank, group) for name, group in (("uccl", dist.group.WORLD), ("gloo", g))}
    torch.testing.assert_close(runs["uccl"][0], runs["gloo"][0], rtol=1e-5, atol=1e-6)
    assert_params_close(runs["uccl"][1], runs["gloo"][1], "FSDP2 uccl vs gloo")
    (ours, ours_p), (theirs, theirs_p) = (fsdp2_run(rank, group, mp_policy=bf16_mixed_precision())
                                          for group in (dist.group.WORLD, g))
    torch.testing.assert_close(ours, theirs, rtol=1e-2, atol=1e-2)
    assert_params_close(ours_p, theirs_p, "FSDP2 bf16 uccl vs gloo", rtol=1e-2, atol=1e-2)
    # And FSDP2 equals DDP on the same data (a real check that sharded gradients are reduced).
    model = make_model()
    ddp_losses = train(DDP(model, process_group=g), rank)
    torch.testing.assert_close(runs["uccl"][0], ddp_losses, rtol=1e-4, atol=1e-5)
    # FSDP1, sharded both ways: uccl as gloo.
    for strategy in ("FULL_SHARD", "SHARD_GRAD_OP"):
        (ours, ours_p), (theirs, theirs_p) = fsdp1_run(rank, dist.group.WORLD, strategy), fsdp1_run(rank, g, strategy)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
        assert_params_close(ours_p, theirs_p, f"FSDP1 {strategy} uccl vs gloo")


def check_sync_batchnorm(rank, world, device):
    """DDP with SyncBatchNorm on `device` (torch runs it on accelerators only; the statistics go
    through all_gather_into_tensor, the backward through all_reduce): each rank normalises its
    shard of the batch with the whole batch's statistics, so training on the shards equals
    BatchNorm on the whole batch in one process (parameters, running mean and variance).
    tests/gpu runs it on CUDA, test_torch_device.py on the test device (batchnorm_kernels.py)."""
    import copy

    device = torch.device(device)
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))
    model = nn.SyncBatchNorm.convert_sync_batchnorm(copy.deepcopy(ref)).to(device)
    ddp = DDP(model, device_ids=ddp_device_ids(device))
    opt, ref_opt = torch.optim.SGD(ddp.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(4 * world, 5, generator=torch.Generator().manual_seed(step))
        opt.zero_grad()
        ddp(x.chunk(world)[rank].to(device)).square().mean().backward()
        opt.step()
        ref_opt.zero_grad()
        ref(x).square().mean().backward()
        ref_opt.step()
    for (name, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-4, atol=1e-5, msg=lambda m: f"SyncBatchNorm {name}: {m}")


def check_on_device(rank, world, device):
    """DDP (plain, with comm hooks, and under Join with ZeroRedundancyOptimizer), FSDP2 (plain,
    bf16 mixed precision, CPU offload) and FSDP1 on `device`'s tensors give what they give on CPU
    tensors (both through uccl, same seeds and batches). tests/gpu runs it on CUDA,
    tests/torch/test_torch_device.py on the PrivateUse1 test device (staged and in place)."""
    device = torch.device(device)
    cpu = torch.device("cpu")

    def ddp_run(dev, hook):
        model = make_model().to(dev)
        ddp = DDP(model, bucket_cap_mb=0.0005, device_ids=ddp_device_ids(dev))
        if hook is not None:
            ddp.register_comm_hook(dist.group.WORLD, hook)
        return train(ddp, rank, device=dev), [p.detach().cpu() for p in model.parameters()]

    def offloaded(dev):  # parameters and optimizer state in pinned host memory on the device side
        from torch.distributed.fsdp import CPUOffloadPolicy

        policies = {} if dev.type == "cpu" else {"offload_policy": CPUOffloadPolicy(pin_memory=True)}
        return fsdp2_run(rank, dist.group.WORLD, dev, **policies)

    runs = [(f"DDP {name}", lambda dev, h=hook: ddp_run(dev, h), tol)
            for name, hook, tol in (("plain", None, 1e-4), ("allreduce_hook", default_hooks.allreduce_hook, 1e-4),
                                    ("fp16_compress_hook", default_hooks.fp16_compress_hook, 1e-2))]
    runs.append(("FSDP2", lambda dev: fsdp2_run(rank, dist.group.WORLD, dev), 1e-4))
    runs.append(("FSDP2 bf16 mixed precision",
                 lambda dev: fsdp2_run(rank, dist.group.WORLD, dev, mp_policy=bf16_mixed_precision()), 1e-2))
    runs.append(("FSDP2 CPU offload", offloaded, 1e-4))
    runs += [(f"FSDP1 {strategy}", lambda dev, st=strategy: fsdp1_run(rank, dist.group.WORLD, st, dev), 1e-4)
             for strategy in ("FULL_SHARD", "SHARD_GRAD_OP")]

    def uneven_run(dev):  # rank 0 compares the consolidated optimizer state too (torch.save/load of dev's tensors)
        losses, params, moments = uneven_zero_run(rank, dist.group.WORLD, dev)
        return losses, params + (moments or [])

    runs.append(("DDP + Join + ZeroRedundancyOptimizer", uneven_run, 1e-4))
    for what, run, tol in runs:
        (loss_dev, params_dev), (loss_cpu, params_cpu) = run(device), run(cpu)
        torch.testing.assert_close(loss_dev, loss_cpu, rtol=tol, atol=tol,
                                   msg=lambda m: f"{what} losses, {device.type} vs cpu: {m}")
        for i, (a, b) in enumerate(zip(params_dev, params_cpu)):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol,
                                       msg=lambda m: f"{what} parameter {i}, {device.type} vs cpu: {m}")


def training_worker(rank, world, port):
    U.init_uccl(rank, world, port)
    g = dist.new_group(backend="gloo")
    check_ddp(rank, world, g)
    check_fsdp2(rank, world, g)
    dist.barrier()
    dist.destroy_process_group()


def test_ddp_and_fsdp2_match_gloo():
    U.spawn(training_worker, 3)
