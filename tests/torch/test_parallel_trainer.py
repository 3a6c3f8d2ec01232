"""uccl.parallel against a single-process run of the same GPT and data: TP (sequence parallel),
1F1B pipelines with unequal stages, ZeRO-1, both layouts, world 4 and 8 on loopback.

Tolerance: float64 throughout, losses and every parameter shard within rtol 1e-9 / atol 1e-11
of the reference after 3 Adam steps (only the summation order differs: TP splits matmuls, DP
and micro-batches split the batch)."""
import pytest
import uccl

if not uccl.build_info().get("torch"):
    pytest.skip("uccl built without the torch backend", allow_module_level=True)

import torch
import torch.distributed as dist

import torch_dist_util as U

STEPS = 3


def check_trainers(rank, world, port, cases):
    U.init_uccl(rank, world, port)
    for case in cases:  # one spawn per world size: each case makes its own groups
        check_trainer(rank, world, *case)
    dist.destroy_process_group()


def check_trainer(rank, world, tp, pp, layout, parts, n_micro):
    from uccl.parallel.model import GPTConfig, reference_slice
    from uccl.parallel.trainer import TrainConfig, Trainer, reference

    cfg = GPTConfig(vocab=64, hidden=16, heads=4, layers=4, seq=8, dtype="float64")
    tc = TrainConfig(tp=tp, pp=pp, layout=layout, parts=parts, micro_batch=2, n_micro=n_micro, lr=1e-2,
                     bucket_bytes=4096)  # small buckets: several reduce-scatters per stage
    tr = Trainer(cfg, tc)
    reports = tr.run(STEPS, warmup=0, log=None)
    ref_losses, ref_params = reference(cfg, tc, tr.global_batch, STEPS)
    for r, ref in zip(reports, ref_losses):
        assert abs(r["loss"] - ref) <= 1e-9 * abs(ref) + 1e-11, (rank, r["step"], r["loss"], ref)
    n = 0
    for p in tr.stage.parameters():
        want = reference_slice(p, ref_params, tp, tr.coord.tp)
        torch.testing.assert_close(p.detach(), want, rtol=1e-9, atol=1e-11,
                                   msg=lambda m: f"rank {rank} {p.full_name} (t={tp} p={pp} {layout}): {m}")
        n += 1
    assert n > 0
    # Every rank holds its share of the model exactly once: count the elements over the world.
    mine = torch.tensor([sum(p.numel() if (p.tp_split is not None or tr.coord.tp == 0) else 0
                             for p in tr.stage.parameters()) if tr.coord.dp == 0 else 0], dtype=torch.int64)
    dist.all_reduce(mine)
    assert mine.item() == cfg.n_params(), (mine.item(), cfg.n_params())


CASES = {  # (tp, pp, layout, layers per stage, micro-batches)
    4: [(2, 2, "holmes", [3, 1], 3),     # TP+PP, unequal stages, odd micro-batch count
        (1, 2, "naive", None, 4),        # PP+DP (ZeRO over 2), naive numbering
        (2, 1, "holmes", None, 2)],      # TP+DP
    8: [(2, 2, "holmes", [1, 3], 4),     # 3-D
        (1, 4, "holmes", [1, 1, 1, 1], 5)],  # deep pipeline, DP 2
}


@pytest.mark.parametrize("world", sorted(CASES))
def test_matches_single_process(world):
    U.spawn(check_trainers, world, CASES[world], deadline_s=400)
