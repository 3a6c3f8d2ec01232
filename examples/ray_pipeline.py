"""Alpa-on-Ray in miniature: a two-stage pipeline of a small model across two Ray actor groups
("meshes"), activations between the stages over uccl send/recv, data-parallel gradients inside
each mesh over uccl allreduce, all through ray.util.collective with backend "uccl". Checked
against the same training run in one process.

    python examples/ray_pipeline.py [--steps 5] [--replicas 2] [--microbatches 2]

Layout with 2 replicas: mesh A = stage 0 (Linear + tanh) on ranks 0, 1; mesh B = stage 1
(Linear + MSE loss) on ranks 2, 3. Replica i is the pipeline rank i -> rank 2 + i. Per step each
stage-0 actor sends every microbatch's activations forward, stage 1 runs forward and backward and
sends the activation gradients back, then each mesh averages its gradients (allreduce) and steps
(plain SGD). Exit status 0 when the losses and final weights match the single-process run.
"""
import argparse
import sys

import numpy as np
import ray

D_IN, HIDDEN, LR = 6, 8, 0.1


def init_weights(seed=0):
    rng = np.random.default_rng(seed)
    return {"w0": rng.normal(0, 0.5, (D_IN, HIDDEN)), "b0": np.zeros(HIDDEN),
            "w1": rng.normal(0, 0.5, (HIDDEN, 1)), "b1": np.zeros(1)}


def make_data(n, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D_IN))
    return x, np.sin(x.sum(axis=1, keepdims=True))


def reference(weights, x, y, steps):
    """The same model and SGD in one process, on the whole batch."""
    import torch
    p = {k: torch.tensor(v, requires_grad=True) for k, v in weights.items()}
    xt, yt, losses = torch.tensor(x), torch.tensor(y), []
    for _ in range(steps):
        loss = ((torch.tanh(xt @ p["w0"] + p["b0"]) @ p["w1"] + p["b1"] - yt) ** 2).mean()
        loss.backward()
        losses.append(loss.item())
        with torch.no_grad():
            for t in p.values():
                t -= LR * t.grad
                t.grad = None
    return losses, {k: v.detach().numpy() for k, v in p.items()}


@ray.remote(num_cpus=0, max_restarts=0)
class Stage:
    """One actor of one mesh: holds its stage's parameters, talks to its pipeline peer."""

    def __init__(self, stage, replica, replicas, weights):
        import torch
        self.torch, self.stage, self.replica, self.replicas = torch, stage, replica, replicas
        names = ("w0", "b0") if stage == 0 else ("w1", "b1")
        self.params = [torch.tensor(weights[k], requires_grad=True) for k in names]
        self.rank = stage * replicas + replica            # in the "world" group
        self.peer = (1 - stage) * replicas + replica      # pipeline partner

    def setup(self, world_size):
        from ray.util import collective as col
        col.init_collective_group(world_size, self.rank, backend="uccl", group_name="world")
        col.init_collective_group(self.replicas, self.replica, backend="uccl", group_name=f"mesh{self.stage}")
        return self.rank

    def step(self, data, microbatches):
        """One training step on this replica's shard; returns stage 1's mean loss (else None)."""
        from ray.util import collective as col
        torch = self.torch
        chunks = np.array_split(data, microbatches)
        loss_sum = 0.0
        if self.stage == 0:
            hs = []
            for xb in chunks:
                h = torch.tanh(torch.tensor(xb) @ self.params[0] + self.params[1])
                col.send(h.detach().contiguous(), self.peer, group_name="world")
                hs.append(h)
            for h in hs:
                g = torch.empty_like(h)
                col.recv(g, self.peer, group_name="world")
                h.backward(g / microbatches)
        else:
            grads = []
            for yb in chunks:
                h = torch.empty((len(yb), HIDDEN), dtype=torch.float64)
                col.recv(h, self.peer, group_name="world")
                h.requires_grad_(True)
                loss = ((h @ self.params[0] + self.params[1] - torch.tensor(yb)) ** 2).mean()
                (loss / microbatches).backward()
                grads.append(h.grad * microbatches)  # d(loss of this microbatch)/dh
                loss_sum += loss.item()
            for g in grads:
                col.send(g.contiguous(), self.peer, group_name="world")
        with torch.no_grad():
            for p in self.params:
                col.allreduce(p.grad, group_name=f"mesh{self.stage}")
                p -= LR * p.grad / self.replicas
                p.grad = None
        return loss_sum / microbatches if self.stage == 1 else None

    def weights(self):
        return [p.detach().numpy() for p in self.params]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--replicas", type=int, default=2, help="data-parallel actors per mesh")
    ap.add_argument("--microbatches", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args(argv)
    r, m = args.replicas, args.microbatches
    if args.batch % (r * m):
        ap.error("--batch must be divisible by replicas * microbatches")
    weights, (x, y) = init_weights(), make_data(args.batch)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": "uccl.ray.register"})  # backend "uccl" in every worker
    try:
        import uccl.ray  # noqa: F401  (and in the driver)
        actors = [Stage.remote(s, i, r, weights) for s in (0, 1) for i in range(r)]
        ray.get([a.setup.remote(2 * r) for a in actors], timeout=300)
        xs, ys = np.array_split(x, r), np.array_split(y, r)
        losses = []
        for _ in range(args.steps):
            out = ray.get([a.step.remote(xs[i] if s == 0 else ys[i], m)
                           for a, (s, i) in zip(actors, [(s, i) for s in (0, 1) for i in range(r)])], timeout=300)
            losses.append(float(np.mean([v for v in out if v is not None])))
        got = ray.get([actors[0].weights.remote(), actors[r].weights.remote()], timeout=300)
    finally:
        ray.shutdown()
    ref_losses, ref = reference(weights, x, y, args.steps)
    diffs = {"loss": np.max(np.abs(np.array(losses) - ref_losses))}
    for name, value in zip(("w0", "b0", "w1", "b1"), got[0] + got[1]):
        diffs[name] = float(np.max(np.abs(value - ref[name])))
    for step, (a, b) in enumerate(zip(losses, ref_losses)):
        print(f"step {step}: loss {a:.9f} (single process {b:.9f})")
    worst = max(diffs.values())
    print(f"largest difference from the single-process run: {worst:.3g} "
          f"({', '.join(f'{k} {v:.2g}' for k, v in diffs.items())})")
    ok = worst < 1e-9
    print("matches the single-process run" if ok else "MISMATCH with the single-process run")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
