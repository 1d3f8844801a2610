#!/usr/bin/env python3
"""ab-summary.py LOG — summarise a same-machine A/B log of the whole-step benchmark.

LOG holds whole-step benchmark outputs, each headed by a line `=== NAME round R` (what
scripts/wholestep-ab-remote.sh writes) or `=== NAME` (session 7's hand-made logs in
docs/cuda-results/experiments/s7/). Prints, for every step and mode, each variant's median
over its rounds of the graph time ("ours", µs; the first variant is the reference, the others
get their change against it) and of the floor, then each eager launch's median per variant.
"""
import re
import statistics
import sys
from collections import OrderedDict, defaultdict

HEAD = re.compile(r"^=== (\S+)(?: round \d+)?\s*$")
STEP = r"(decode bs \d+, ~2k prefix|prefill 8192 tokens)"
MODE = r"(K\+V PARTIAL|K only PARTIAL|K\+V ALL)"
# The results table: step, mode, ours, queued, StepGraph, step API, SGLang, speed-up, floor, ...
TABLE = re.compile(rf"^  {STEP}\s+{MODE}\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)x\s+([\d.]+)\s")
# The eager launches: "plan 11.8, HEAD verify (K+V pair) 24.9, ..., sum 116.3" (or, with the
# plan and the head verify in one launch, "plan + HEAD verify (K+V) 12.1, ...").
EAGER = re.compile(rf"^  {STEP}\s+{MODE}\s+(plan (?:\+ [^,]+ )?[\d.]+,.*)$")
LAUNCH = re.compile(r"\s*(.+?) ([\d.]+)$")


def parse(path):
    """variant -> {(step, mode): {"ours": [..], "floor": [..], "eager": {launch: [..]}}}"""
    runs = OrderedDict()
    name = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            m = HEAD.match(line)
            if m:
                name = m.group(1)
                runs.setdefault(name, defaultdict(lambda: {"ours": [], "floor": [], "eager": OrderedDict()}))
                continue
            if name is None:
                continue
            m = TABLE.match(line)
            if m:
                row = runs[name][(m.group(1), m.group(2))]
                row["ours"].append(float(m.group(3)))
                row["floor"].append(float(m.group(9)))
                continue
            m = EAGER.match(line)
            if m and "/" not in m.group(3):
                row = runs[name][(m.group(1), m.group(2))]
                for part in m.group(3).split(", "):
                    p = LAUNCH.match(part)
                    if p:
                        row["eager"].setdefault(p.group(1), []).append(float(p.group(2)))
    return runs


def med(values):
    return statistics.median(values) if values else None


def cell(value, ref=None):
    if value is None:
        return "-"
    text = f"{value:.1f}"
    if ref:
        text += f" ({(value - ref) / ref * 100:+.0f}%)"
    return text


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    runs = parse(sys.argv[1])
    if not runs:
        sys.exit(f"ab-summary: no `=== NAME` sections in {sys.argv[1]}")
    names = list(runs)
    rows = []
    for variant in runs.values():
        for key in variant:
            if key not in rows:
                rows.append(key)
    width = 16
    print("graph µs (ours), median over rounds; change against " + names[0])
    print(f"{'step':28} {'mode':16}" + "".join(f"{n:>{width}}" for n in names) + f"{'floor (' + names[0] + ')':>16}")
    for key in rows:
        ref = med(runs[names[0]][key]["ours"]) if key in runs[names[0]] else None
        cells = []
        for n in names:
            v = med(runs[n][key]["ours"]) if key in runs[n] else None
            cells.append(cell(v, ref if n != names[0] else None))
        floor = med(runs[names[0]][key]["floor"]) if key in runs[names[0]] else None
        print(f"{key[0]:28} {key[1]:16}" + "".join(f"{c:>{width}}" for c in cells) + f"{cell(floor):>16}")
    print()
    print("eager launches µs, median over rounds: " + " / ".join(names))
    for key in rows:
        launches = OrderedDict()
        for n in names:
            for launch in runs[n][key]["eager"] if key in runs[n] else []:
                launches.setdefault(launch, None)
        if not launches:
            continue
        parts = []
        for launch in launches:
            values = [med(runs[n][key]["eager"].get(launch, [])) if key in runs[n] else None for n in names]
            parts.append(f"{launch} " + " / ".join(cell(v) for v in values))
        print(f"  {key[0]:28} {key[1]:16} " + ", ".join(parts))


if __name__ == "__main__":
    main()
