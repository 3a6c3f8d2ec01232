"""python -m uccl.planner: predict iteration times and search parallel strategies.

    python -m uccl.planner --cluster cluster.yaml [--model model.yaml] [--top 5] [--json]
    python -m uccl.planner --preset a100:1024 --model-preset gpt-145b
    python -m uccl.planner --cluster cluster.yaml --profile     # measure device speeds here first
    python -m uccl.planner --cluster cluster.yaml --validate 3  # run the top 3 with the trainer
    python -m uccl.planner --cluster cluster.yaml --calibration cal.json  # measured costs (below)

Communication is priced by uccl's own cost model (uccl.cost: the C++ topology reader, cost
model and algorithm selection a communicator uses). With --calibration (written by
`torchrun ... -m uccl.planner.calibrate`, e.g. through benchmarks/testbed/run_trainer.py
validate) every operation costs max(links' cost, the measured CPU-bound cost of its group
shape) and compute comes from measured block times: see uccl/planner/calibration.py. The
calibration run also measures every link level's rate with uccl-perf's sendrecv (two ranks of a
host, two hosts of each cluster, each pair of clusters): --calibration prices links at those
measured rates instead of the topology file's declared ones.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m uccl.planner", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cluster", help="cluster file (see uccl/planner/spec.py)")
    ap.add_argument("--model", help="model file (else the cluster file's 'model:')")
    ap.add_argument("--preset", help="paper-scale cluster KIND:N, e.g. a100:1024, h100:16384")
    ap.add_argument("--model-preset", default="gpt-145b", help="gpt-145b | gpt-1t (with --preset)")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--layouts", default="holmes,naive")
    ap.add_argument("--max-micro-batch", type=int, default=8)
    ap.add_argument("--json", action="store_true", help="print the plans as JSON")
    ap.add_argument("--profile", action="store_true",
                    help="measure each device kind's speed on this machine (a transformer layer of the model, "
                         "under the kind's cpu_quota if declared) before planning")
    ap.add_argument("--calibration", metavar="FILE",
                    help="a calibration (python -m uccl.planner.calibrate; run_trainer.py validate writes one): "
                         "measured compute per device kind and communication per group shape; each operation "
                         "is priced as the slower of the links' and the calibrated CPU-bound cost")
    ap.add_argument("--calibration-spec", metavar="OUT",
                    help="write the calibration run's input for this cluster and model to OUT and exit; then on "
                         "the cluster: torchrun ... -m uccl.planner.calibrate --spec OUT (rank 0 prints "
                         "'RESULT {json}': save the JSON and pass it as --calibration)")
    ap.add_argument("--validate", type=int, default=0, metavar="K",
                    help="run the top K plans with uccl.parallel.train here (torchrun, one host) and print "
                         "predicted against measured")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per validation run")
    args = ap.parse_args(argv)

    from . import presets, spec
    from .estimate import Comm
    from .search import describe_groups, plan_dict, search
    t0 = time.perf_counter()
    try:
        if args.preset:
            kind, n = args.preset.split(":")
            cluster, model = presets.gpu_cluster(kind, int(n)), presets.model(args.model_preset)
        elif args.cluster:
            cluster, model = spec.load(args.cluster, args.model)
        else:
            ap.error("give --cluster FILE or --preset KIND:N")
        if args.profile:
            from .profile import profile_devices
            for name, flops in profile_devices(cluster, model, log=lambda s: print(s, file=sys.stderr)).items():
                for d in cluster.device_of_rank:
                    if d.name == name:
                        d.flops = flops
        topo = cluster.topology()
    except (spec.PlanInputError, OSError, KeyError, ValueError) as e:
        print(f"uccl.planner: {e}", file=sys.stderr)
        return 2
    if args.calibration_spec:
        from .calibration import make_spec
        with open(args.calibration_spec, "w") as f:
            json.dump(make_spec(cluster, model, args.max_micro_batch), f, indent=1)
        print(f"wrote {args.calibration_spec}: run it with torchrun -m uccl.planner.calibrate --spec "
              f"{args.calibration_spec} on the cluster's {cluster.world} ranks")
        return 0
    comm = Comm.from_uccl(topo)
    if args.calibration:
        from .calibration import Calibration, apply
        try:
            cal = Calibration.load(args.calibration)
            comm = apply(cal, cluster, comm)
            for level, gbit in sorted((cal.doc.get("links") or {}).items()):
                print(f"link {level}: measured {gbit:.4g} Gbit/s (replaces the declared rate)", file=sys.stderr)
        except (OSError, ValueError, KeyError) as e:
            print(f"uccl.planner: calibration {args.calibration}: {e}", file=sys.stderr)
            return 2
    plans, stats = search(model, cluster, comm, top=max(args.top, args.validate),
                          layouts=tuple(args.layouts.split(",")), max_micro_batch=args.max_micro_batch)
    elapsed = time.perf_counter() - t0
    out = [plan_dict(e, s, describe_groups(cluster, comm, model, s)) for e, s in plans]
    if args.validate:
        from .validate import validate_local
        for d in out[:args.validate]:
            d["measured_s"] = validate_local(d, model, cluster.world, steps=args.steps)
            d["error"] = d["predicted_s"] / d["measured_s"] - 1
    if args.json:
        print(json.dumps({"world": cluster.world, "model": vars(model), "search_s": elapsed,
                          "search": vars(stats), "plans": out[:max(args.top, args.validate)]}, indent=1))
        return 0 if out else 1
    print(f"{cluster.world} devices, model {vars(model)}")
    print(f"searched in {elapsed:.2f} s: {stats.nodes} (t,p,layout,b) nodes, {stats.pruned} pruned by the bound, "
          f"{stats.evaluated} plans estimated, {stats.infeasible} over memory")
    if not out:
        print("no plan fits the devices' memory")
        return 1
    for i, d in enumerate(out, 1):
        g = d["groups"]
        br = " ".join(f"{k} {v:.3g}s" for k, v in d["breakdown_s"].items())
        meas = f" measured {d['measured_s']:.3f}s ({d['error'] * 100:+.1f}%)" if "measured_s" in d else ""
        print(f"#{i} t={d['tp']} p={d['pp']} d={d['dp']} b={d['micro_batch']} m={d['n_micro']} {d['layout']} "
              f"parts={d['parts']} order={d['order']}: {d['predicted_s']:.4g} s/iter{meas}, "
              f"{d['tokens_per_s']:.4g} tok/s, {d['memory_gib']:.3g} GiB/device [{br}]")
        print("     groups: " + "; ".join(f"{k}({v['size']}) {v['where']} {v['algorithm']}".rstrip()
                                          for k, v in g.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
