#!/usr/bin/env python3
"""tests/tools/check_layers.py: the house rules of the tree's layout (docs/architecture.md), checked so the picture
cannot silently rot. Run by ci/test.sh; exits 1 when a rule is broken.

  1. Arrows point down: the folders of src/ and kernels/ are layers, and an #include may only point down or
     sideways within a layer:
         app -> bench -> train -> hw -> families | ckpt -> graph | parallel | data -> kernels -> tb | trace -> core
     Inside kernels/: backend/ (the Backend table, the registry ops.def, the op spec table) -> the op folders
     (kernels/<op>: an op may include common/ and, sideways, another op's header) -> common/ (types, the device,
     what every op shares), which includes no op.
  2. No circles: neither between folders (folder A includes B and B, through any path, A) nor between files
     (a.h includes b.h includes a.h). With --objects BUILD, also none between the source files' symbols: a.c
     calling b.c calling a.c, read from the object files' defined and undefined symbols with nm (the kind of
     circle includes alone do not show: volume.c calling the readers that use volume.c's types). With --objects,
     also no call up: a source file calls only into its own layer or those below (a call the headers hide, as
     model.h declaring functions that a layer above defines, is found here).
  3. No file over MAX_LINES lines in src/ and kernels/ (a file that long holds more than one purpose).
  4. With --objects: the float32 GEMM is cpu_sgemm (kernels/common/cpu_gemm.c), called by every kernel; no other
     object calls OpenBLAS's cblas_sgemm or cblas_sgemv itself. OpenBLAS 0.3.21 runs its Prescott (SSE) kernels on
     CPUs it does not know (Emerald Rapids), and cpu_gemm.c is where that is caught: attention and the transformer's
     GEMMs, calling OpenBLAS directly, ran 4x slower than the CPU there (vit3d-diffusion-64: 2389 ms a step, 582
     through cpu_sgemm).

--report prints what the note on a layout change counts: files per folder, the largest files, upward includes and
circles."""
import argparse
import collections
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_LINES = 600
LAYER = {"core": 0, "tb": 1, "trace": 1, "kernels/common": 2, "kernels": 3, "kernels/backend": 4, "graph": 5,
         "parallel": 5, "data": 5, "families": 6, "ckpt": 6, "hw": 7, "train": 8, "bench": 9, "app": 10}
INCLUDE_DIRS = ["src", "kernels"]  # the Makefile's -I order (build/gen holds generated headers)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".def")


def rel(path):
    return os.path.relpath(path, ROOT)


def folder_of(path):
    """src/<layer>/... -> src/<layer>; kernels/<op>/... -> kernels/<op>; kernels/backend/ops.def -> kernels"""
    parts = rel(path).split(os.sep)
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def layer_of(folder):
    top, _, sub = folder.partition("/")
    if top == "src":
        return LAYER[sub]
    return LAYER.get(folder, LAYER["kernels"])  # kernels/common, kernels/backend, or an op folder


def sources():
    for top in ("src", "kernels"):
        for base, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    yield os.path.join(base, f)


def resolve(name, here):
    """The file an #include "name" in file `here` reads: its own folder first, then the -I folders; None for a
    generated header (build/gen) or a system one."""
    for d in [os.path.dirname(here)] + [os.path.join(ROOT, d) for d in INCLUDE_DIRS]:
        p = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(p):
            return p
    return None


def cycles(graph):
    """Strongly connected components of more than one node (or a node with an edge to itself): Tarjan's."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def symbol_graph(build):
    """Source file -> source files whose symbols it uses, from nm over the objects of build/src and build/kernels."""
    defined, used = {}, collections.defaultdict(set)
    for top in ("src", "kernels"):
        for base, _, files in os.walk(os.path.join(build, top)):
            for f in files:
                if not f.endswith(".o"):
                    continue
                obj = os.path.join(base, f)
                src = os.path.relpath(obj, build)[: -len(".o")]
                src = src[: -len(".cu")] + ".cu" if src.endswith(".cu") else src + ".c"
                out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True).stdout
                for line in out.splitlines():
                    parts = line.split()
                    if len(parts) < 2:
                        continue
                    sym, kind = parts[0], parts[1]
                    if kind == "U":
                        used[src].add(sym)
                    elif kind in "TDBR":
                        defined[sym] = src
    graph = collections.defaultdict(set)
    for src, syms in used.items():
        for s in syms:
            if s in defined and defined[s] != src:
                graph[src].add(defined[s])
    return graph, used


DIRECT_GEMM = {"cblas_sgemm", "cblas_sgemv"}  # rule 4: only cpu_gemm.c calls these
GEMM_HOME = "kernels/common/cpu_gemm.c"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", action="store_true", help="print the counts (files per folder, largest files)")
    ap.add_argument("--objects", metavar="BUILD", help="also check for circles between the object files' symbols")
    args = ap.parse_args()

    bad, lines, per_folder = [], {}, collections.Counter()
    file_graph, folder_graph = collections.defaultdict(set), collections.defaultdict(set)
    for path in sources():
        text = open(path, encoding="utf-8").read()
        here = folder_of(path)
        per_folder[here] += 1
        lines[rel(path)] = text.count("\n")
        for name in INCLUDE.findall(text):
            target = resolve(name, path)
            if target is None:
                continue
            there = folder_of(target)
            file_graph[rel(path)].add(rel(target))
            if there != here:
                folder_graph[here].add(there)
            if layer_of(there) > layer_of(here):
                bad.append("%s (%s) includes %s (%s, a layer above)" % (rel(path), here, name, there))

    upward = len(bad)
    folder_cycles, file_cycles = cycles(folder_graph), cycles(file_graph)
    for c in folder_cycles:
        bad.append("folders include each other in a circle: " + " -> ".join(c))
    for c in file_cycles:
        bad.append("files include each other in a circle: " + " -> ".join(c))
    symbol_cycles, calls_up = [], 0
    if args.objects:
        calls, used = symbol_graph(args.objects)
        for src in sorted(used):
            direct = sorted(used[src] & DIRECT_GEMM)
            if direct and src != GEMM_HOME:
                bad.append("%s calls %s itself: call cpu_sgemm/cpu_sgemv (%s), which picks kernels of this CPU's "
                           "width" % (src, ", ".join(direct), GEMM_HOME))
        symbol_cycles = cycles(calls)
        for c in symbol_cycles:
            bad.append("source files call each other in a circle: " + " -> ".join(c))
        for src in sorted(calls):
            for dst in sorted(calls[src]):
                here, there = folder_of(os.path.join(ROOT, src)), folder_of(os.path.join(ROOT, dst))
                if layer_of(there) > layer_of(here):
                    calls_up += 1
                    bad.append("%s (%s) calls into %s (%s, a layer above)" % (src, here, dst, there))
    too_long = sorted((n, p) for p, n in lines.items() if n > MAX_LINES)
    for n, p in too_long:
        bad.append("%s has %d lines (the rule: at most %d; split it by purpose)" % (p, n, MAX_LINES))

    if args.report:
        print("files per folder:")
        for folder in sorted(per_folder, key=lambda f: (layer_of(f), f)):
            print("  %-24s %3d files, layer %d" % (folder, per_folder[folder], layer_of(folder)))
        print("largest files:")
        for p, n in sorted(lines.items(), key=lambda kv: -kv[1])[:5]:
            print("  %5d  %s" % (n, p))
    for b in bad:
        print(b)
    print("layers: %d upward includes, %d folder circles, %d file circles%s, %d files over %d lines" %
          (upward, len(folder_cycles), len(file_cycles),
           ", %d symbol circles, %d upward calls" % (len(symbol_cycles), calls_up) if args.objects else "",
           len(too_long), MAX_LINES))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
