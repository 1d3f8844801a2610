#!/usr/bin/env python3
"""Plot the CUDA benchmark (benches/cuda): entries/s against entries, one panel per op, graph
replay with warm and cold L2, with the copy roofline (measured 1 GiB device-to-device copy
bandwidth over each op's bytes per entry) as a line.

    python3 scripts/bench-plot.py bench.csv bench.png
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Bytes each op must move per entry at the least (inputs read once, outputs written once).
BYTES_PER_ENTRY = {"plan": 4 + 32, "verify": 32 + 64 + 64, "write": 24 + 32}


def main(src, dst):
    rows = list(csv.DictReader(open(src)))
    copy = [r for r in rows if r["op"] == "copy"]
    bw = 2 * (1 << 30) / (float(copy[0]["median_us"]) * 1e-6) if copy else None
    ops = [op for op in ("plan", "verify", "write") if any(r["op"] == op for r in rows)]
    fig, axes = plt.subplots(1, max(len(ops), 1), figsize=(6 * max(len(ops), 1), 5), squeeze=False)
    for ax, op in zip(axes[0], ops):
        for l2, marker in (("warm", "o"), ("cold", "s")):
            pts = sorted(
                (int(r["entries"]), float(r["entries_per_s"]), r["workload"])
                for r in rows
                if r["op"] == op and r["mode"] == "graph" and r["l2"] == l2
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker, label=f"graph, {l2} L2")
            if l2 == "warm":
                for x, y, name in pts:
                    ax.annotate(name.split(",")[0], (x, y), fontsize=6, alpha=0.7)
        if bw:
            ax.axhline(bw / BYTES_PER_ENTRY[op], color="k", ls="--", lw=1,
                       label=f"copy roofline ({bw / 1e12:.2f} TB/s / {BYTES_PER_ENTRY[op]} B)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("entries")
        ax.set_ylabel("entries / s")
        ax.set_title(op)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(dst, dpi=120)


if __name__ == "__main__":
    main(*sys.argv[1:3])
