#!/usr/bin/env python3
"""tests/tools/check_layers.py: the folders of src/ are layers, and an #include may only point down (or sideways
within a layer): app -> bench -> train -> model | parallel | data -> kernels -> tb | trace -> core. Prints every include
that points up and exits 1 if there is one; run by ci/test.sh, so the architecture picture cannot silently rot."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYER = {"core": 0, "tb": 1, "trace": 1, "kernels": 2, "model": 3, "parallel": 3, "data": 3, "train": 4, "bench": 5,
         "app": 6}
KERNEL_HEADERS = {f for f in os.listdir(os.path.join(ROOT, "kernels")) if f.endswith(".h")}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of_file(path):
    rel = os.path.relpath(path, ROOT).split(os.sep)
    return rel[1] if rel[0] == "src" else rel[0]


def layer_of_include(name, here):
    first = name.split("/")[0]
    if "/" in name and first in LAYER:
        return first
    if name in KERNEL_HEADERS:
        return "kernels"
    return here  # a file of its own folder (or a generated header beside it)


bad = []
for top in ("src", "kernels"):
    for base, _, files in os.walk(os.path.join(ROOT, top)):
        for f in files:
            if not f.endswith((".c", ".h", ".cu")):
                continue
            path = os.path.join(base, f)
            here = layer_of_file(path)
            for name in INCLUDE.findall(open(path, encoding="utf-8").read()):
                there = layer_of_include(name, here)
                if LAYER[there] > LAYER[here]:
                    bad.append("%s (%s) includes %s (%s, a layer above)" % (os.path.relpath(path, ROOT), here, name, there))
for b in bad:
    print(b)
print("layers: %d upward includes" % len(bad))
sys.exit(1 if bad else 0)
