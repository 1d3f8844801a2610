#!/usr/bin/env python3
"""cargo-executables.py NAME [NAME ...] < cargo's --message-format=json output

Prints "NAME PATH" for every executable cargo reports having built (a compiler-artifact
message with an executable) whose target is one of the NAMEs. Shared by scripts/gpu-build.sh
and scripts/wholestep-ab.sh, which stage those binaries for the GPU machine.
"""
import json
import sys

want = set(sys.argv[1:])
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in want:
        print(m["target"]["name"], m["executable"])
