"""Launching and registration: torchrun with 4 ranks on a script that never imports uccl
(torch's "torch.backends" entry point registers the backend), and registration in every
import order, including with torch's autoload switched off."""
import pytest
import uccl

if not uccl.build_info().get("torch"):  # the build says so; never guess from imports
    pytest.skip("uccl built without the torch backend", allow_module_level=True)

import os
import subprocess
import sys
import textwrap

TORCHRUN_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    dist.init_process_group("uccl")  # env:// from torchrun; no `import uccl` anywhere
    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "uccl", dist.get_backend()
    t = torch.full((5,), float(rank))
    dist.all_reduce(t)
    assert t.tolist() == [float(sum(range(world)))] * 5, t
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
    model(torch.randn(3, 4) + rank).sum().backward()
    w = model.module.weight.grad.clone()
    dist.broadcast(w, src=0)
    assert torch.equal(w, model.module.weight.grad)
    dist.destroy_process_group()
    print(f"rank {rank} ok", flush=True)
    """
)


def _env(**extra):
    env = dict(os.environ)
    # Children must see the same uccl as this test (conftest already cleaned sys.path).
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.update(extra)
    return env


def test_torchrun_4_ranks_without_import_uccl(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TORCHRUN_SCRIPT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", str(script)]
    p = subprocess.run(cmd, cwd=tmp_path, env=_env(OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, f"torchrun failed:\n{p.stdout}\n{p.stderr}"
    for r in range(4):
        assert f"rank {r} ok" in p.stdout, p.stdout


REGISTERED = "import torch.distributed as d; assert 'UCCL' in d.Backend._plugins, 'uccl not registered'; print('ok')"


@pytest.mark.parametrize(
    "code, autoload",
    [
        ("import torch\n" + REGISTERED, "1"),  # entry point alone
        ("import torch, uccl\n" + REGISTERED, "0"),  # torch first, then uccl registers at once
        ("import uccl, torch\n" + REGISTERED, "0"),  # uccl first: its import hook registers
        ("import uccl, sys\nassert 'torch' not in sys.modules, 'import uccl imported torch'\nprint('ok')", "1"),
    ],
    ids=["entry-point", "torch-then-uccl", "uccl-then-torch", "uccl-alone-stays-light"],
)
def test_registration_in_every_import_order(tmp_path, code, autoload):
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(TORCH_DEVICE_BACKEND_AUTOLOAD=autoload),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "ok" in p.stdout, f"{p.stdout}\n{p.stderr}"


def test_register_is_idempotent():
    import torch.distributed as dist

    from uccl import _torch_backend

    assert _torch_backend.register()
    assert _torch_backend.register()
    assert "UCCL" in dist.Backend._plugins
