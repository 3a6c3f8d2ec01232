"""Markdown tables from run_trainer.py's JSON files (for uccl/parallel/RESULTS.md).

    python benchmarks/testbed/trainer_report.py trainer_holmes.json trainer_hetero.json trainer_validate.json
"""
import json
import statistics
import sys


def holmes(d):
    rows = d["rows"]
    out = ["| round | environment (intra/inter Gbit/s) | layout | tokens/s | step s | dp s | pp s | load1 |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['round']} | {r['env']} ({r['rates_gbit'][0]}/{r['rates_gbit'][1]}) | {r['layout']} | "
                   f"{r['tokens_per_s']:.0f} | {r['step_s']:.3f} | {r['comm_s'].get('dp', 0):.3f} | "
                   f"{r['comm_s'].get('pp', 0):.3f} | {r['load1_before']:.1f} |")
    out.append("")
    for rnd in sorted({r["round"] for r in rows}):
        by = {(r["env"], r["layout"]): r["tokens_per_s"] for r in rows if r["round"] == rnd}
        f = by[("all_fast", "holmes")]
        out.append(f"round {rnd}: all-slow / all-fast = {by[('all_slow', 'holmes')] / f:.2f}; "
                   f"mixed holmes / all-fast = {by[('mixed', 'holmes')] / f:.2f}; "
                   f"mixed naive / all-fast = {by[('mixed', 'naive')] / f:.2f}")
    return "\n".join(out)


def hetero(d):
    rows = d["rows"]
    out = ["| round | case | parts | tokens/s | step s | load1 |", "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['round']} | {r['case']} | {r['parts']} | {r['tokens_per_s']:.0f} | {r['step_s']:.3f} | "
                   f"{r['load1_before']:.1f} |")
    out.append("")
    for rnd in sorted({r["round"] for r in rows}):
        by = {r["case"]: r["tokens_per_s"] for r in rows if r["round"] == rnd}
        s = by["c0_alone"] + by["c1_alone"]
        out.append(f"round {rnd}: adapt / (c0 + c1 alone) = {by['both_adapt'] / s:.2f}; "
                   f"uniform / (c0 + c1 alone) = {by['both_uniform'] / s:.2f}")
    return "\n".join(out)


def spearman(xs, ys):
    """Rank correlation (no ties expected among measured/predicted seconds)."""
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0] * len(v)
        for k, i in enumerate(order):
            r[i] = k
        return r
    rx, ry, n = ranks(xs), ranks(ys), len(xs)
    if n < 2:
        return float("nan")
    return 1 - 6 * sum((a - b) ** 2 for a, b in zip(rx, ry)) / (n * (n * n - 1))


def validate(d):
    rows = d["rows"]
    link = all("predicted_link_only_s" in r for r in rows)
    out = ["| # | t | p | d | b | m | layout | parts | order | predicted s | measured s | error |"
           + (" links-only model s (error) |" if link else "") + " load1 |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if link else "") + "---|"]
    for r in rows:
        lo = (f" {r['predicted_link_only_s']:.3f} ({(r['predicted_link_only_s'] / r['measured_s'] - 1) * 100:+.0f}%) |"
              if link else "")
        out.append(f"| {r['rank_predicted']} | {r['tp']} | {r['pp']} | {r['dp']} | {r['micro_batch']} | {r['n_micro']} | "
                   f"{r['layout']} | {r['parts']} | {r['order']} | {r['predicted_s']:.3f} | {r['measured_s']:.3f} | "
                   f"{r['error'] * 100:+.1f}% |{lo} {r['load1_before']:.1f} |")
    errs = [abs(r["error"]) for r in rows]
    best = min(r["measured_s"] for r in rows)
    out.append("")
    out.append(f"{sum(e <= 0.15 for e in errs)} of {len(errs)} plans within 15%, {sum(e <= 0.2 for e in errs)} within "
               f"20%; median |error| {statistics.median(errs) * 100:.1f}%; rank correlation (Spearman) predicted vs "
               f"measured {spearman([r['predicted_s'] for r in rows], [r['measured_s'] for r in rows]):.2f}; "
               f"planner's first choice measured {rows[0]['measured_s']:.3f} s, best measured {best:.3f} s "
               f"({(rows[0]['measured_s'] / best - 1) * 100:+.1f}%)")
    return "\n".join(out)


def main():
    for path in sys.argv[1:]:
        with open(path) as f:
            d = json.load(f)
        what = d["config"]["what"]
        print(f"### {what} ({path}, {d['wall_s']:.0f} s)\n")
        print({"holmes": holmes, "hetero": hetero, "validate": validate}[what](d))
        print()


if __name__ == "__main__":
    main()
