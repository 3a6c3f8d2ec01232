"""busbw vs size, one line per library, from compare.py's JSON.

    python benchmarks/plot.py benchmarks/results/allreduce_2r.json   # writes ...allreduce_2r.png
"""
import json
import sys


def plot(doc, path):
    import matplotlib
    matplotlib.use("Agg")  # no display on benchmark machines
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    rows = [r for r in doc["rows"] if r["size"] > 0]
    for lib in doc["libs"]:
        ax.plot([r["size"] for r in rows], [r["libs"][lib]["busbw"] for r in rows], marker="o", label=lib)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"{doc['collective']}, {doc['nranks']} ranks, {doc['dtype']} ({doc['host']}, {doc['date'][:10]})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        with open(p) as f:
            plot(json.load(f), p[:-5] + ".png" if p.endswith(".json") else p + ".png")
