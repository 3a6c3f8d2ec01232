"""torch.distributed.checkpoint, functional collectives and autograd collectives on uccl.

A job saves an FSDP2 model and its Adam state with torch.distributed.checkpoint (DCP: its
planner agrees on the plan with gather_object / scatter_object_list / all_gather_object /
broadcast_object_list, then barriers), and a job of another world size loads it, resharded:
the loaded parameters are the saved ones, and one more step from the checkpoint gives what the
saving job got from that step, so the optimizer's moments came back too. The same processes
check the functional collectives (torch.distributed._functional_collectives: what DTensor and
torch.compile'd programs call) and the autograd-aware ones (torch.distributed.nn.functional,
whose backward passes are collectives too) against values worked out here.
tests/torch/test_torch_device.py runs the same checks on the PrivateUse1 test device."""
import pytest
import uccl

if not uccl.build_info().get("torch"):  # the build says so; never guess from imports
    pytest.skip("uccl built without the torch backend", allow_module_level=True)

import os

import torch
import torch.distributed as dist
import torch.nn as nn

import test_torch_training as TT
import torch_dist_util as U

ROWS = 12  # one global batch: world sizes 2, 3 and 4 split it evenly, so every world's mean gradient is the same


def make_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 19), nn.ReLU(), nn.Linear(19, 5))


def sharded(device, seed):
    """An FSDP2 model (each layer and the root sharded: uneven shards at world 3) and its Adam."""
    from torch.distributed.device_mesh import DeviceMesh

    model = make_model(seed).to(device)
    TT.shard_layers(model, DeviceMesh.from_group(dist.group.WORLD, torch.device(device).type))
    return model, torch.optim.Adam(model.parameters(), lr=0.05)


def step(model, opt, n, rank, world, device):
    """Step n on this rank's rows of global batch n."""
    x = torch.randn(ROWS, 8, generator=torch.Generator().manual_seed(1000 + n)).chunk(world)[rank].to(device)
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()


def full_params(model):
    return [p.full_tensor().detach().cpu() for p in model.parameters()]


def check_save(rank, world, device, path, steps=2):
    """Trains `steps` steps, saves model and optimizer to `path`, then takes one step more; rank 0
    writes the full parameters at the save and after that step (the loading job's references)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, opt = sharded(device, seed=0)
    for n in range(steps):
        step(model, opt, n, rank, world, device)
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=os.path.join(path, "ckpt"))
    saved = full_params(model)
    step(model, opt, steps, rank, world, device)
    after = full_params(model)  # a collective: every rank calls it
    if rank == 0:
        torch.save({"saved": saved, "after": after, "steps": steps}, os.path.join(path, "reference.pt"))
    dist.barrier()


def check_load(rank, world, device, path):
    """Loads the checkpoint into a model made from another seed, on this job's world size."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    ref = torch.load(os.path.join(path, "reference.pt"))
    model, opt = sharded(device, seed=1)
    model_sd, optim_sd = get_state_dict(model, opt)  # the shapes to load into (Adam's state made)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=os.path.join(path, "ckpt"))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    for i, (got, want) in enumerate(zip(full_params(model), ref["saved"])):
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=lambda m: f"loaded parameter {i}, rank {rank}: {m}")
    step(model, opt, ref["steps"], rank, world, device)
    for i, (got, want) in enumerate(zip(full_params(model), ref["after"])):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"parameter {i} a step after loading, rank {rank}: {m}")


def check_functional(rank, world, device):
    """torch.distributed._functional_collectives and torch.distributed.nn.functional (forward and
    backward) on `device`'s tensors."""
    import torch.distributed._functional_collectives as funcol
    import torch.distributed.nn.functional as dnn

    group = dist.group.WORLD
    ranks_sum = float(sum(range(world)))
    t = torch.arange(6, dtype=torch.float32, device=device) + rank
    expect = torch.arange(6, dtype=torch.float32) * world + ranks_sum
    got = funcol.all_reduce(t, "sum", group)
    assert got.device == t.device, got.device
    torch.testing.assert_close(got.cpu(), expect, msg=lambda m: f"funcol.all_reduce: {m}")
    both = funcol.all_reduce_coalesced([t, 2 * t], "max", group)
    for k, b in enumerate(both):
        torch.testing.assert_close(b.cpu(), (k + 1) * (torch.arange(6.0) + world - 1),
                                   msg=lambda m: f"funcol.all_reduce_coalesced[{k}]: {m}")
    got = funcol.all_gather_tensor(t, 0, group)
    torch.testing.assert_close(got.cpu(), torch.cat([torch.arange(6.0) + r for r in range(world)]),
                               msg=lambda m: f"funcol.all_gather_tensor: {m}")
    got = funcol.reduce_scatter_tensor(torch.arange(3.0 * world, device=device) * (rank + 1), "sum", 0, group)
    torch.testing.assert_close(got.cpu(), torch.arange(3.0 * world)[3 * rank:3 * rank + 3] * (ranks_sum + world),
                               msg=lambda m: f"funcol.reduce_scatter_tensor: {m}")
    # Uneven splits: rank r sends r + 1 elements (each its own rank) to every peer.
    got = funcol.all_to_all_single(torch.full(((rank + 1) * world,), float(rank), device=device),
                                   [r + 1 for r in range(world)], [rank + 1] * world, group)
    torch.testing.assert_close(got.cpu(), torch.cat([torch.full((r + 1,), float(r)) for r in range(world)]),
                               msg=lambda m: f"funcol.all_to_all_single: {m}")
    got = funcol.broadcast(t * 0 + rank, src=world - 1, group=group)
    torch.testing.assert_close(got.cpu(), torch.full((6,), float(world - 1)), msg=lambda m: f"funcol.broadcast: {m}")

    # Autograd: y = all_reduce(x * (rank + 1)); d(sum of y over ranks)/dx on rank r is (r + 1) * world.
    x = torch.arange(4, dtype=torch.float32, device=device).requires_grad_()
    dnn.all_reduce(x * (rank + 1)).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((4,), float((rank + 1) * world)),
                               msg=lambda m: f"nn.functional.all_reduce backward: {m}")
    # all_gather's backward is a reduce_scatter: rank r's x appears in every rank's output at r.
    x = torch.full((3,), float(rank), device=device, requires_grad=True)
    outs = dnn.all_gather(x)
    sum((i + 1) * o.sum() for i, o in enumerate(outs)).backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((3,), float(world * (rank + 1))),
                               msg=lambda m: f"nn.functional.all_gather backward: {m}")
    # all_to_all's backward sends the gradients back where their inputs came from.
    x = torch.full((world,), float(rank), device=device, requires_grad=True)
    outs = dnn.all_to_all([torch.empty(1, device=device) for _ in range(world)], list(x.chunk(world)))
    torch.testing.assert_close(torch.cat(outs).detach().cpu(), torch.arange(world, dtype=torch.float32),
                               msg=lambda m: f"nn.functional.all_to_all: {m}")
    sum((rank + 1) * (j + 1) * o.sum() for j, o in enumerate(outs)).backward()
    torch.testing.assert_close(x.grad.cpu(), torch.tensor([(r + 1.0) * (rank + 1) for r in range(world)]),
                               msg=lambda m: f"nn.functional.all_to_all backward: {m}")


def save_worker(rank, world, port, path):
    U.init_uccl(rank, world, port)
    check_functional(rank, world, "cpu")
    check_save(rank, world, "cpu", path)
    dist.destroy_process_group()


def load_worker(rank, world, port, path):
    U.init_uccl(rank, world, port)
    check_load(rank, world, "cpu", path)
    dist.destroy_process_group()


def test_checkpoint_saved_at_world_4_loads_resharded_at_world_3(tmp_path):
    U.spawn(save_worker, 4, str(tmp_path))
    U.spawn(load_worker, 3, str(tmp_path))
