"""Markdown tables for RESULTS.md from compare.py's JSON files.

    python benchmarks/summarize.py benchmarks/results/*.json
"""
import json
import sys


def human(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def table(doc):
    libs = doc["libs"]
    others = [x for x in libs if x != "uccl"]
    head = ["size", "uccl us"] + [f"{x} us" for x in others] + [f"{x} busbw" for x in libs] + \
           [f"uccl/{x}" for x in others]
    load = doc.get("load_start", doc["loadavg"])[0]
    lines = [f"**{doc['collective']}, {doc['nranks']} ranks, {doc['dtype']}** (finished {doc['date']}, 1-min load "
             f"{load:.2f} at start, {doc['loadavg'][0]:.2f} at end; median of {doc['rounds']} alternating rounds; "
             f"busbw in GB/s)", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in doc["rows"]:
        L = r["libs"]
        cells = [human(r["size"]), "%.2f" % L["uccl"]["time_us"]] + ["%.2f" % L[x]["time_us"] for x in others]
        cells += ["%.3f" % L[x]["busbw"] for x in libs]
        cells += ["**%.2f**" % r[f"uccl/{x}"] for x in others]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        with open(p) as f:
            doc = json.load(f)
        if "libs" in doc:  # compare.py output (two_hosts.sh writes uccl-perf's JSON)
            print(table(doc))
            print()
