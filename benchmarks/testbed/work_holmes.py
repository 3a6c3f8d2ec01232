"""Rank program: Holmes layout vs a naive one on 2 clusters x 2 hosts x 2 ranks.

A 2-stage pipeline with data parallelism 4:
  holmes: stage = cluster; the DP group of a stage is its cluster (gradient all_reduce on the
          fast fabric); the pipeline crosses clusters (activations over the slow link).
  naive:  stage = host index inside the cluster; DP groups span both clusters (gradients over
          the slow link); the pipeline stays inside a cluster.
Per step: GPipe-style, M microbatches of activations forward and activation-gradients back
between the two stages, then the gradient all_reduce in the DP group (algorithm: auto).

    work_holmes.py LAYOUT GRAD_MIB ACT_MIB MICROBATCHES STEPS
"""
import json
import sys
import time

import numpy as np

import uccl


def main():
    layout, grad_mib, act_mib, m, steps = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), \
        int(sys.argv[5])
    world = uccl.init()
    r = world.rank
    c, h, l = r // 4, (r // 2) % 2, r % 2
    if layout == "holmes":
        stage, dp_color, peer = c, c, (1 - c) * 4 + h * 2 + l
    else:
        stage, dp_color, peer = h, h, c * 4 + (1 - h) * 2 + l
    dp = world.split(dp_color, name=f"dp{dp_color}")
    grad = np.ones(int(grad_mib * (1 << 18)), np.float32)
    act = np.ones(int(act_mib * (1 << 18)), np.float32)
    t_ar, t_pp, t_step, algo = [], [], [], ""
    for s in range(steps + 1):  # step 0 warms up connections
        world.barrier()
        t0 = time.perf_counter()
        for _ in range(m):
            world.send(act, peer) if stage == 0 else world.recv(act, peer)
        for _ in range(m):
            world.recv(act, peer) if stage == 0 else world.send(act, peer)
        t1 = time.perf_counter()
        w = dp.all_reduce(grad, async_op=True)
        w.wait()
        algo = w.stats()["algorithm"]
        t2 = time.perf_counter()
        if s:
            t_pp.append(t1 - t0)
            t_ar.append(t2 - t1)
            t_step.append(t2 - t0)
    mine = np.array([np.mean(t_ar), np.mean(t_pp), np.mean(t_step)])
    worst = world.all_reduce(mine, op="max")
    if r == 0:
        print("RESULT " + json.dumps({"rank": 0, "layout": layout, "grad_allreduce_s": float(worst[0]),
                                      "pipeline_s": float(worst[1]), "step_s": float(worst[2]),
                                      "dp_algorithm": algo, "dp_describe": dp.describe()}), flush=True)
    world.barrier()


if __name__ == "__main__":
    main()
