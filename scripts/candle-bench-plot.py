#!/usr/bin/env python3
"""Plots the candle GPU engine's benchmark (issue 34): the model's decode step time and the
canary's share, PARTIAL and ALL, against batch size, from `candle-gpu`'s output lines.

    python3 scripts/candle-bench-plot.py candle-bench.log[,more.log] docs/candle-gpu-bench.png "NVIDIA H100 80GB HBM3"

Reads lines like
    decode bs  64 tokens    64 mode PARTIAL: model   12.345 ms, model+canary   12.400 ms, canary   0.055 ms ( 0.45 %), ...
and draws two panels: step time (model alone, model + canary per mode) and the canary's share
in percent (per mode), both against batch size (log scale), with the 1 % target marked. With
several runs of a row (several logs, comma-separated, or several runs in one log) each point is
the median over the runs and the share's bar spans their smallest and largest.
"""

import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LINE = re.compile(
    r"^(?P<kind>decode|prefill) bs\s+(?P<bs>\d+) tokens\s+(?P<tokens>\d+) mode (?P<mode>\w+)\s*:"
    r" model\s+(?P<model>[\d.]+) ms, model\+canary\s+(?P<guarded>[\d.]+) ms,"
    r" canary\s+(?P<canary>-?[\d.]+) ms \(\s*(?P<pct>-?[\d.]+) %\)"
)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def main(logs, png, card):
    rows = []
    for log in logs.split(","):
        with open(log) as f:
            for line in f:
                m = LINE.match(line.strip())
                if m and m["kind"] == "decode":
                    rows.append(m.groupdict())
    if not rows:
        sys.exit(f"no decode rows in {logs}")
    modes = sorted({r["mode"] for r in rows})
    sizes = sorted({int(r["bs"]) for r in rows})
    runs = {(b, m): [r for r in rows if int(r["bs"]) == b and r["mode"] == m] for b in sizes for m in modes}
    fig, (ax_t, ax_p) = plt.subplots(1, 2, figsize=(11, 4.2))
    model = [median([float(r["model"]) for m in modes for r in runs[(b, m)]]) for b in sizes]
    ax_t.plot(sizes, model, "k-o", label="model alone")
    for mode in modes:
        have = [b for b in sizes if runs[(b, mode)]]
        guarded = [median([float(r["guarded"]) for r in runs[(b, mode)]]) for b in have]
        pct = [[float(r["pct"]) for r in runs[(b, mode)]] for b in have]
        mid = [median(p) for p in pct]
        ax_t.plot(have, guarded, "--s", label=f"model + canary ({mode})")
        ax_p.errorbar(
            have,
            mid,
            yerr=[[m - min(p) for m, p in zip(mid, pct)], [max(p) - m for m, p in zip(mid, pct)]],
            fmt="-o",
            capsize=4,
            label=f"{mode} (median, range over {max(len(p) for p in pct)} runs)",
        )
    ax_p.axhline(1.0, color="red", lw=0.8, ls=":", label="1 % target (PARTIAL)")
    for ax in (ax_t, ax_p):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("decode batch size (~2k-token prefixes)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax_t.set_ylabel("step time, median (ms)")
    ax_p.set_ylabel("canary share of the step (%)")
    fig.suptitle(f"candle engine + mistralrs-paged-attn, bf16, CUDA events: {card}", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    print(f"wrote {png} ({len(rows)} decode rows, modes {modes})")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
