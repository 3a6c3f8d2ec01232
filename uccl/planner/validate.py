"""Running a plan with uccl.parallel.train and reading back its measured iteration time."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import List

from .spec import ModelSpec


def free_port() -> int:
    # torchrun's --master-port=0 leaves the ranks connecting to port 0: pick one here.
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trainer_args(plan: dict, model: ModelSpec, steps: int = 4, warmup: int = 1) -> List[str]:
    return ["-m", "uccl.parallel.train", "--tp", str(plan["tp"]), "--pp", str(plan["pp"]),
            "--layout", plan["layout"], "--parts", ",".join(map(str, plan["parts"])),
            "--order", ",".join(map(str, plan["order"])), "--micro-batch", str(plan["micro_batch"]),
            "--micro-batches", str(plan["n_micro"]), "--layers", str(model.layers), "--hidden", str(model.hidden),
            "--heads", str(model.heads), "--seq", str(model.seq), "--vocab", str(model.vocab),
            "--steps", str(steps), "--warmup", str(warmup), "--quiet"]


def parse_result(stdout: str) -> dict:
    for part in stdout.split("RESULT ")[1:]:
        return json.JSONDecoder().raw_decode(part)[0]
    raise RuntimeError("the trainer printed no RESULT line:\n" + stdout[-2000:])


def validate_local(plan: dict, model: ModelSpec, world: int, steps: int = 4, timeout: int = 900) -> float:
    """Runs the plan on this host with torchrun; returns the measured median iteration seconds."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={world}", f"--master-port={free_port()}",
           *trainer_args(plan, model, steps)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    return parse_result(p.stdout)["step_s"]
