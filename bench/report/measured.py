#!/usr/bin/env python3
"""bench/report/measured.py: docs/measured.md, the measured figures as tables drawn from results/ JSON, so that no
figure in a document is typed by hand or goes stale (issue 36); history lives in results/ and git, not in prose.

  python3 bench/report/measured.py [--results results] [--out docs/measured.md]   write the tables
  python3 bench/report/measured.py --check                 exit 1 where the committed file differs from the JSON's
  python3 bench/report/measured.py --readme README.md      also replace the lines between <!-- measured:begin --> and
                                                           <!-- measured:end --> with one headline row per device/config

One section per folder under results/ that holds benchmark JSON (subfolders such as bf16/ are their own section): the
machine, ISA level, BLAS/GEMM kernels, and the commits of the figures with their dates, then the training step against
PyTorch (where pytorch_step_<config>.json lies beside step_<config>.json), bench kernels' fractions of the ceilings,
bench scaling's measured rows and bench allreduce. Every number is read from a JSON file; a date is the git date of the
commit a JSON names (the JSON records no date), "?" where this clone lacks that commit. Output is deterministic:
folders and configs sorted, no time of generation. Needs no matplotlib (unlike report.py).
Exit codes: 0 done; 1 --check found a difference; 2 bad usage (no markers in the README, no results folder)."""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import data  # noqa: E402  (classify: the one place that knows the results file names)

sys.path.append(os.path.dirname(HERE))
import isa_env  # noqa: E402  (bench/isa_env.py: the ISA-capping variables' one spelling)

BEGIN, END = "<!-- measured:begin -->", "<!-- measured:end -->"
# OpenBLAS's kernel families and the vector tier they run on (kernels/common/cpu_isa.c, cpu_gemm_openblas_tier): what
# a folder's JSON says about its ISA when it predates the "isa" field
BLAS_TIER = {"skylakex": "AVX-512", "cooperlake": "AVX-512", "sapphirerapids": "AVX-512", "haswell": "AVX2",
             "zen": "AVX2", "excavator": "AVX2", "sandybridge": "AVX", "bulldozer": "AVX", "piledriver": "AVX",
             "steamroller": "AVX", "prescott": "SSE", "nehalem": "SSE"}


def fmt(x, digits=1):
    return "%.*f" % (digits, x) if isinstance(x, (int, float)) and x is not None else "?"


def blas_of(detail):
    """("OpenBLAS 0.3.21", "Cooperlake") from a device_detail or blas string, or (None, None)."""
    m = re.search(r"(OpenBLAS \S+).*?(\w+) MAX_THREADS=", detail or "")
    return (m.group(1), m.group(2)) if m else (None, None)


class Folder:
    """The benchmark JSON of one folder, by kind and key (data.classify), plus whatever else parses as JSON."""

    def __init__(self, results, path):
        self.path = path
        self.name = os.path.relpath(path, results)
        self.docs = {}  # (kind, key) -> JSON
        self.other = {}  # file name -> JSON (alternate, zero_modes, baselines): read for the machine only
        self.runs = {}  # config -> bench/side_by_side.sh's PyTorch runs (pytorch_baselines_<config>.json, a list)
        for f in sorted(glob.glob(os.path.join(path, "*.json"))):
            base = os.path.basename(f)[:-5]
            try:
                with open(f) as fh:
                    doc = json.load(fh)
            except (OSError, ValueError) as e:
                raise SystemExit("measured: %s is not readable JSON: %s" % (f, e))
            kind, key = data.classify(base)
            if base.startswith("pytorch_baselines_") and isinstance(doc, list):
                self.runs[base[len("pytorch_baselines_"):]] = doc
            elif kind and kind != "summary":
                self.docs[(kind, key)] = doc
            else:
                self.other[base] = doc

    def all_docs(self):
        return [self.docs[k] for k in sorted(self.docs, key=str)] + [self.other[k] for k in sorted(self.other)]

    def baselines(self, config):
        """bench/side_by_side.sh's PyTorch runs of a config (pytorch_baselines_<config>.json), [] before it wrote them"""
        return self.runs.get(config, [])

    def get(self, kind):
        return {key: d for (k, key), d in sorted(self.docs.items(), key=lambda kv: str(kv[0][1])) if k == kind}

    def machine(self):
        """The machine as the JSON names it: bench's cpu/cores or the device_detail up to its BLAS."""
        names = set()
        for d in self.all_docs():
            if d.get("backend") == "cuda" and d.get("device_detail"):
                names.add(d["device_detail"])
            elif d.get("cpu") and d.get("cores"):
                names.add("%s, %s cores" % (d["cpu"], d["cores"]))
            elif d.get("device_detail"):
                m = re.match(r"(.*?, \d+ cores)", d["device_detail"])
                if m:
                    names.add(m.group(1))
        return "; ".join(sorted(names)) or "not recorded"

    def blas(self):
        kinds = set()
        for d in self.all_docs():
            isa = d.get("isa") or ""
            if "GEMM: " in isa:  # the GEMM the run dispatched to (oneDNN's where OpenBLAS's kernels are older)
                kinds.add(isa.split("GEMM: ", 1)[1])
                continue
            lib, fam = blas_of(d.get("blas") or d.get("device_detail") or d.get("device_line"))
            if lib:
                kinds.add("%s, %s kernels" % (lib, fam))
        return "; ".join(sorted(kinds)) or "not recorded"

    def isa(self):
        """The recorded ISA (bench's "isa", the trainer's device line); else the tier of the BLAS kernels, said so."""
        got = set()
        for d in self.all_docs():
            if d.get("isa"):
                got.add(d["isa"].split("; GEMM:", 1)[0])
            m = re.search(r"threads, ([^;]+); GEMM:", d.get("device_line", ""))
            if m:
                got.add(m.group(1))
        if got:
            return "; ".join(sorted(got))
        tiers = set()
        for d in self.all_docs():
            _, fam = blas_of(d.get("blas") or d.get("device_detail"))
            if fam and fam.lower() in BLAS_TIER:
                tiers.add("%s (OpenBLAS's %s kernels)" % (BLAS_TIER[fam.lower()], fam))
        if tiers:
            return "at least " + "; ".join(sorted(tiers)) + "; the JSON records no ISA"
        return "not recorded"

    def commits(self):
        return sorted({d["commit"] for d in self.all_docs() if d.get("commit")})


def commit_date(commit, cache={}):
    """The committer date of a commit named in a JSON (YYYY-MM-DD), "?" where this clone lacks it; a build from a
    changed tree ("<hash>-dirty") is dated by the commit it changed."""
    if commit not in cache:
        p = subprocess.run(["git", "show", "-s", "--format=%cs", commit.removesuffix("-dirty") + "^{commit}"], cwd=ROOT,
                           capture_output=True, text=True)
        cache[commit] = p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else "?"
    return cache[commit]


def commit_cell(d):
    c = d.get("commit")
    return "%s (%s)" % (c, commit_date(c)) if c else "not recorded"


def table(*columns):
    """A markdown table's header and its separator, one "---" per column."""
    return ["| %s |" % " | ".join(columns), "|" + "---|" * len(columns)]


def row(*cells):
    return "| %s |" % " | ".join(map(str, cells))


def step_rows(f):
    """[(config, step JSON, pytorch JSON or None, fastest PyTorch run of the config's baselines or None)]."""
    torch = f.get("pytorch_step")
    out = []
    for cfg, d in f.get("step").items():
        runs = [b for b in f.baselines(cfg) if b.get("step_ms_median")]
        out.append((cfg, d, torch.get(cfg), min(runs, key=lambda b: b["step_ms_median"]) if runs else None))
    return out


def torch_version(t):
    """The PyTorch version a reference JSON names: its "torch", else the one in "framework" ("pytorch 2.15.0")"""
    m = re.search(r"pytorch (\S+)", t.get("framework", ""), re.I)
    return t.get("torch") or (m.group(1) if m else None)


def fastest_cells(d, b):
    """The fastest PyTorch run side_by_side.sh measured (version, mode) and voxscale's speed-up over it"""
    if not b:
        return ["-", "-"]
    mode = b.get("mode", "eager").split(" (")[0]
    return ["%s (torch %s, %s)" % (fmt(b["step_ms_median"]), torch_version(b) or "?", mode),
            fmt(b["step_ms_median"] / d["step_ms_median"], 2) + "x"]


def loader_rows(f):
    """bench data's runs (data_<config>.json) beside bench/data_side_by_side.sh's PyTorch loaders and djpeg's floor
    (pytorch_data_<config>.json)"""
    loaders = sorted(k[len("data_"):] for k in f.other if k.startswith("data_"))
    if not loaders:
        return []
    out = ["### Loader (bench data): images/s, decode and transforms, the cache off", "",
           *table("config", "images", "input", "data.resize", "workers", "voxscale images/s",
                  "PyTorch DataLoader images/s (decoder)", "voxscale / PyTorch", "djpeg ms per file (full, 1/8)",
                  "commit")]
    for cfg in loaders:
        d, b = f.other["data_" + cfg], f.other.get("pytorch_data_" + cfg) or {}
        runs = b.get("runs", [])
        theirs = "; ".join("%s (%s, %s)" % (fmt(r["images_per_s"]), r["decoder"], r["framework"]) for r in runs) or "-"
        ratio = "; ".join(fmt(d["images_per_s"] / r["images_per_s"], 2) + "x" for r in runs) or "-"
        floor = "%s, %s" % (fmt(b["djpeg_ms_full"]), fmt(b["djpeg_ms_eighth"])) if "djpeg_ms_full" in b else "-"
        out.append(row(cfg, d.get("images", "?"), "x".join(str(v) for v in d.get("input_size", [])), d.get("resize"),
                       d.get("workers"), fmt(d.get("images_per_s")), theirs, ratio, floor, commit_cell(d)))
    return out + [""]


def section(f):
    out = ["## %s" % f.name, "",
           "| | |", "|---|---|",  # (a key-value table: no column names)
           row("machine", f.machine()),
           row("ISA level", f.isa()),
           row("BLAS / GEMM kernels", f.blas()),
           row("commits (dates)", ", ".join("%s (%s)" % (c, commit_date(c))
                                            for c in sorted(f.commits(), key=lambda c: (commit_date(c), c)))),
           ""]
    steps = step_rows(f)
    if steps:
        out += ["### Training step (bench step) against PyTorch", "",
                *table("config", "batch", "precision", "voxscale ms/step (median)", "PyTorch ms/step (median)",
                       "PyTorch / voxscale", "fastest PyTorch measured", "its time / voxscale's", "conv GFLOP/s",
                       "of the GEMM ceiling", "commit")]
        for cfg, d, t, b in steps:
            ratio = fmt(t["step_ms_median"] / d["step_ms_median"], 2) + "x" if t else "no reference"
            out.append(row(cfg, d.get("batch", "?"), d.get("precision", "?"), fmt(d.get("step_ms_median")),
                           reference_cell(t), ratio, *fastest_cells(d, b), fmt(d.get("conv_gflops")),
                           "%s of %s GFLOP/s" % (fmt(d.get("fraction_of_ceiling"), 2), fmt(d.get("ceiling_gflops"))),
                           commit_cell(d)))
        out.append("")
    out += loader_rows(f)
    kernels = f.get("kernels")
    if kernels:
        out += ["### Kernels (bench kernels): median over cases of the fraction of the ceiling probed beside each", "",
                *table("config", "cases", "failed checks", "compute-bound", "memory-bound", "GEMM ceiling GFLOP/s",
                       "copy ceiling GB/s", "commit")]
        for cfg, d in kernels.items():
            cells = []
            for bound in ("compute", "memory"):
                v = [k.get("fraction_of_local_ceiling", k.get("fraction_of_ceiling")) for k in d["kernels"]
                     if k.get("bound") == bound]
                v = [x for x in v if x is not None]
                cells.append("%s (%d)" % (fmt(statistics.median(v), 2), len(v)) if v else "-")
            c = d.get("ceilings", {})
            out.append(row(cfg, len(d["kernels"]), d.get("failed_checks", "?"), cells[0], cells[1],
                           fmt(c.get("gemm_gflops")), fmt(c.get("copy_gbps")), commit_cell(d)))
        out.append("")
    scaling = f.get("scaling")
    if scaling:
        out += ["### Scaling (bench scaling): measured rows", "",
                *table("config", "mode", "ranks", "global batch", "samples/s", "speedup", "efficiency",
                       "model error", "commit")]
        for cfg, d in scaling.items():
            for r in d["rows"]:
                if r.get("kind") != "measured":
                    continue
                out.append(row(cfg, r["mode"], r["ranks"], r.get("global_batch", "?"), fmt(r.get("samples_per_s"), 2),
                               fmt(r.get("speedup"), 2), fmt(r.get("efficiency"), 2), fmt(r.get("model_error"), 2),
                               commit_cell(d)))
        out.append("")
    allreduce = f.get("allreduce")
    if allreduce:
        out += ["### All-reduce (bench allreduce)", "",
                *table("ranks", "communicator", "average bus bandwidth GB/s", "largest message",
                       "its in-place bus GB/s", "fit: latency us, bus GB/s", "wrong", "commit")]
        for n, d in allreduce.items():
            last = max(d["rows"], key=lambda r: r["bytes"]) if d.get("rows") else {}
            fit = d.get("fit") or {}
            out.append(row(n, d.get("communicator", "?"), fmt(d.get("avg_bus_bandwidth_gbps"), 2),
                           "%s MiB" % fmt(last.get("bytes", 0) / 2 ** 20, 0), fmt(last.get("ip_busbw_gbps"), 2),
                           "%s, %s" % (fmt(fit.get("alpha_us")), fmt(fit.get("bus_gbps"), 2)), d.get("wrong", "?"),
                           commit_cell(d)))
        out.append("")
    return out


def folders(results):
    """Every folder under results/ (at any depth) that holds benchmark JSON, sorted."""
    out = []
    for dirpath, dirnames, _ in os.walk(results):
        dirnames.sort()
        if dirpath == results:
            continue
        f = Folder(results, dirpath)
        if f.docs:
            out.append(f)
    return sorted(out, key=lambda f: f.name)


def measured_md(results):
    fs = folders(results)
    out = ["# Measured figures", "",
           "Generated by `python3 bench/report/measured.py` from the JSON under results/; do not edit by hand "
           "(tests/integration/test_measured.py fails when this file differs from what the JSON gives). One section "
           "per results folder; a folder's history is its files' git log. Dates are those of the commits the JSON "
           "names.",
           ""]
    for f in fs:
        out += section(f)
    return "\n".join(out).rstrip("\n") + "\n"


def reference_cell(t):
    """The PyTorch figure with the version it was measured with, where its JSON records one (files before the field
    do not: said, not guessed; issue 38 compares against PyTorch 2.x from PyPI)."""
    if not t:
        return "-"
    v = torch_version(t)
    cell = "%s (torch %s)" % (fmt(t["step_ms_median"]), v) if v else "%s (version not recorded)" % fmt(t["step_ms_median"])
    if t.get("isa_env"):  # held below the CPU's ISA (bench/side_by_side.sh records the variables)
        cell += ", " + isa_env.describe(t["isa_env"])
    return cell


def headline(results):
    """The README's block: one row per device folder and config with a step figure."""
    out = table("device", "ISA level", "config", "voxscale ms/step", "PyTorch ms/step", "PyTorch / voxscale",
                "fastest PyTorch measured", "its time / voxscale's", "commit")
    for f in folders(results):
        for cfg, d, t, b in step_rows(f):
            out.append(row(f.name, f.isa(), cfg, fmt(d.get("step_ms_median")), reference_cell(t),
                           fmt(t["step_ms_median"] / d["step_ms_median"], 2) + "x" if t else "-",
                           *fastest_cells(d, b), commit_cell(d)))
    out += ["", "Every figure per device (kernels, scaling, all-reduce): [docs/measured.md](docs/measured.md), "
            "generated from results/ by `python3 bench/report/measured.py --readme README.md`."]
    return out


def replace_block(text, lines, where):
    """text with the lines strictly between the BEGIN and END marker lines replaced by lines."""
    src = text.split("\n")
    begins = [i for i, l in enumerate(src) if l.strip() == BEGIN]
    ends = [i for i, l in enumerate(src) if l.strip() == END]
    if len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]:
        raise ValueError("%s: needs one line %s and, after it, one line %s (found %d and %d); the measured block "
                         "goes between them" % (where, BEGIN, END, len(begins), len(ends)))
    return "\n".join(src[:begins[0] + 1] + lines + src[ends[0]:])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=os.path.join(ROOT, "results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "measured.md"))
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    ap.add_argument("--readme", metavar="FILE", help="replace the measured block of FILE (between the markers)")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.results):
        ap.error("%s: no such folder" % a.results)
    md = measured_md(a.results)
    if a.readme:  # checked before anything is written: a missing marker must not leave half the work done
        try:
            with open(a.readme) as fh:
                readme = replace_block(fh.read(), headline(a.results), a.readme)
        except (OSError, ValueError) as e:
            print("measured: %s" % e, file=sys.stderr)
            return 2
    if a.check:
        old = open(a.out).read() if os.path.exists(a.out) else None
        if old != md:
            print("measured: %s is stale: regenerate with `python3 bench/report/measured.py`" % a.out)
            return 1
        print("measured: %s matches results/" % a.out)
    else:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as fh:
            fh.write(md)
        print("measured: wrote %s (%d folders)" % (a.out, len(folders(a.results))))
    if a.readme:
        with open(a.readme, "w") as fh:
            fh.write(readme)
        print("measured: replaced the measured block of %s" % a.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
