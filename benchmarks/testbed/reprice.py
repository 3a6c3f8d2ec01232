"""Re-prices the plans of a validation run (run_trainer.py validate's JSON) with the planner's
current model and a calibration, against the times measured then: for checking a model change
without running the trainer again (a model tuned this way must still be validated by a new run).

    python benchmarks/testbed/reprice.py trainer_validate.json [--calibration FILE]
"""
import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from trainer_report import spearman  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--calibration", default="", help="default: the one the run used (else trainer_calibration.json)")
    a = ap.parse_args()
    from netbed import topology_doc
    from uccl.planner import calibration as cb, spec
    from uccl.planner.estimate import Comm, Strategy, estimate
    with open(a.results) as f:
        d = json.load(f)
    cfg, rows = d["config"], d["rows"]
    cal_path = a.calibration or rows[0].get("calibration")
    if cal_path and not os.path.exists(cal_path):  # another machine: the copy kept beside the results
        cal_path = os.path.join(os.path.dirname(os.path.abspath(a.results)), "trainer_calibration.json")
    doc = {"topology": topology_doc(2, 2, cfg["fast"], cfg["slow"]),
           "devices": {"cpu": {"flops": rows[0]["device_flops"]["cpu"], "memory_gib": 4,
                               "cpu_quota": cfg["quota_fast"]}},
           "hosts": {"default": {"device": "cpu", "count": 2}},
           "model": dict(layers=cfg["layers"], hidden=cfg["hidden"], heads=cfg["heads"], seq=cfg["seq"],
                         vocab=cfg["vocab"], global_batch=cfg["global_batch"], bucket_bytes=1 << 20)}
    cluster, model = spec.cluster_from_dict(doc), spec.model_from_dict(doc["model"])
    comm = Comm.from_uccl(cluster.topology())
    if cal_path:
        comm = cb.apply(cb.Calibration.load(cal_path), cluster, comm)
    errs, pred, meas = [], [], []
    for r in rows:
        st = Strategy(r["tp"], r["pp"], r["dp"], r["micro_batch"], r["n_micro"], r["layout"], r["parts"], r["order"])
        e = estimate(model, cluster, comm, st)
        err = e.time_s / r["measured_s"] - 1
        errs.append(abs(err))
        pred.append(e.time_s)
        meas.append(r["measured_s"])
        print(f"t={st.tp} p={st.pp} d={st.dp} b={st.micro_batch} m={st.n_micro} {st.layout} {st.parts}: "
              f"predicted {e.time_s:.3f} (was {r['predicted_s']:.3f}) measured {r['measured_s']:.3f} "
              f"({err * 100:+.1f}%) {json.dumps({k: round(v, 3) for k, v in e.breakdown.items()})}")
    best = min(range(len(rows)), key=lambda i: meas[i])
    first = min(range(len(rows)), key=lambda i: pred[i])
    print(f"{sum(e <= 0.15 for e in errs)}/{len(errs)} within 15%, {sum(e <= 0.2 for e in errs)} within 20%, median "
          f"|error| {statistics.median(errs) * 100:.1f}%, Spearman {spearman(pred, meas):.2f}, lowest predicted "
          f"measured {meas[first]:.3f} s vs best {meas[best]:.3f} s ({(meas[first] / meas[best] - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
