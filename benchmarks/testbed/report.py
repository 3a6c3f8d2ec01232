"""RESULTS.md from run_bench.py's results (tables of measured busbw vs the model)."""
import model


def _mib(b):
    return f"{b / 2**20:g}"


def markdown(res):
    cfg, s = res["config"], tuple(res["grid"])
    n = s[0] * s[1] * s[2]
    intra, inter = cfg["intra"], cfg["inter"]
    lines = [f"### {n} ranks = {s[2]} clusters x {s[1]} hosts x {s[0]} ranks; {intra:g} Gbit/s inside a cluster, "
             f"{inter:g} Gbit/s between clusters; tbf queue {cfg.get('queue_ms', 20)} ms "
             f"({res.get('bench_inter_drops', '?')} drops on the inter-cluster link during the sweep); launched with "
             f"{'torchrun' if cfg['torchrun'] else 'plain processes'}",
             "",
             "busbw in Gbit/s (nccl-tests factors); pred = model busbw (benchmarks/testbed/model.py); "
             "meas/pred = achieved fraction of the prediction; hier/ring = speed-up of hierarchical.", ""]
    rows = {(r["coll"], r["algo"], r["bytes"]): r for r in res["bench"]}
    for coll in dict.fromkeys(r["coll"] for r in res["bench"]):
        lines += [f"**{coll}**", "",
                  "| size MiB | ring busbw | ring pred | ring meas/pred | hier busbw | hier pred (AGtime) "
                  "| hier meas/pred | hier/ring |", "|---|---|---|---|---|---|---|---|"]
        for D in sorted({b for (c, a, b) in rows if c == coll}):
            ring, hier = rows.get((coll, "ring", D)), rows.get((coll, "hier", D))
            fac = (2 if coll == "all_reduce" else 1) * (n - 1) / n
            pr = D / model.ring_time(coll, D, s, intra, inter) * fac * 8 / 1e9
            ph = D / model.hier_time(coll, D, s, intra, inter) * fac * 8 / 1e9
            rb, hb = ring["busbw_GBps"] * 8, hier["busbw_GBps"] * 8
            lines.append(f"| {_mib(D)} | {rb:.3f} | {pr:.3f} | {rb / pr:.2f} | {hb:.3f} | {ph:.3f} | {hb / ph:.2f} "
                         f"| {hb / rb:.2f} |")
        lines.append("")
    lines += ["**Holmes layout vs naive** (2-stage pipeline x DP 4; gradient all_reduce of "
              f"{cfg['grad_mib']:g} MiB per step, {cfg['microbatches']} microbatches of {cfg['act_mib']:g} MiB "
              "activations each way; slowest rank, mean of "
              f"{cfg['steps']} steps)", "",
              "| layout | DP groups | grad all_reduce s/step | pipeline s/step | step s | DP algorithm |",
              "|---|---|---|---|---|---|"]
    for h in res["holmes"]:
        where = "inside a cluster" if h["layout"] == "holmes" else "across clusters"
        lines.append(f"| {h['layout']} | {where} | {h['grad_allreduce_s']:.3f} | {h['pipeline_s']:.3f} | "
                     f"{h['step_s']:.3f} | {h['dp_algorithm']} |")
    lines.append("")
    return "\n".join(lines)
