#!/usr/bin/env python3
"""bench/alternate.py CONFIG --base BIN: this build, another build (the parent commit's, say) and the PyTorch/MONAI
reference, timed in turns on the same machine in the same run, so that a shared machine's load moves all three
alike. Each round runs `voxscale bench step` with both binaries and the reference's --bench (the order rotating
between rounds), and records each one's median and fastest step and the load average before it; the figures are
the median over the rounds of the runs' medians, and the fastest step of all (what each reaches when the machine
is least disturbed: on a shared 2-core VM at a load average of 200 the medians measure the neighbours). Writes
results/<device>/alternate_<config>.md (and .json) and prints it.
--python names the reference's Python (default .venv's: Debian's torch 1.13; the bench venv's PyTorch 2.x is
.venv-bench/bin/python, `make bench-venv`); --best adds that Python's --best mode (torch.compile, fused SDPA, fused
AdamW; its compilation is in the warm-up) as a fourth run in each round, so the ratio against the mode a user would
pick is measured in the same rounds too (side_by_side.sh runs each side once, one after the other, and on a noisy
VM that ordering alone moved the vit3d ratio by 0.3x).

  bench/alternate.py configs/default.json --base /tmp/parent/voxscale --rounds 5
  bench/alternate.py configs/vit3d-diffusion-64.json --base /tmp/parent/voxscale --python .venv-bench/bin/python --best
  bench/alternate.py configs/vit3d-diffusion-64.json --base ... --python .venv-bench/bin/python --best --amp bf16
--amp bf16 times both builds with `--amp bf16` and the reference under its bf16 autocast (eager and --best), and
writes results/<device>/bf16/alternate_<config>_bf16.md (.json) so that the float32 file stays.
  ITERS / WARMUP: steps per run (default 6 / 2)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import isa_env  # bench/isa_env.py, beside this script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def vx_step(binary, config, iters, warmup, env, amp="off"):
    out = tempfile.mkdtemp(prefix="vx-alt-")
    p = subprocess.run([binary, "bench", "step", "--config", config, "--iters", str(iters), "--warmup", str(warmup),
                        "--device", "cpu", "--results", out] + (["--amp", amp] if amp != "off" else []), cwd=ROOT,
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("alternate.py: %s bench step failed (%d):\n%s" % (binary, p.returncode, (p.stdout + p.stderr)[-2000:]))
    [dev] = os.listdir(out)
    stem = os.path.splitext(os.path.basename(config))[0]
    j = json.load(open(os.path.join(out, dev, "step_%s.json" % stem)))
    dline = next((l for l in (p.stdout + p.stderr).splitlines() if l.startswith("device: ")), "")
    return j, dline


def reference(config, batch, iters, warmup, python, best=False, amp="off"):
    family = json.load(open(os.path.join(ROOT, config))).get("model", {}).get("family", "ae3d")
    out = tempfile.mktemp(suffix=".json")
    p = subprocess.run([python, os.path.join(ROOT, "bench", "reference", family + ".py"), "--config", config, "--bench",
                        "--device", "cpu", "--iters", str(iters), "--warmup", str(warmup), "--batch-size", str(batch),
                        "--tf32", "1", "--out", out] + (["--best"] if best else []) +
                       (["--dtype", amp] if amp != "off" else []), cwd=ROOT, capture_output=True,
                       text=True, env=isa_env.with_inductor_cache())
    if p.returncode != 0:
        sys.exit("alternate.py: the reference failed (%d):\n%s" % (p.returncode, (p.stdout + p.stderr)[-2000:]))
    return json.load(open(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("--base", required=True, help="the other voxscale binary (the parent commit's build)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "voxscale"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--results", default=os.path.join(ROOT, "results"))
    ap.add_argument("--label", default="", help="what the base binary is (for the table)")
    ap.add_argument("--python", default=None, help="the reference's Python (default .venv's, else python3)")
    ap.add_argument("--best", action="store_true", help="also time the reference's --best mode in each round")
    ap.add_argument("--amp", default="off", choices=["off", "bf16"],
                    help="bf16: voxscale --amp bf16 against the reference's bf16 autocast")
    args = ap.parse_args()
    iters, warmup = int(os.environ.get("ITERS", 6)), int(os.environ.get("WARMUP", 2))
    python = args.python or os.path.join(ROOT, ".venv", "bin", "python")
    if not os.access(python, os.X_OK):
        if args.python:
            sys.exit("alternate.py: --python %s is not an executable (the bench venv: make bench-venv)" % python)
        python = "/usr/bin/python3"
    env = dict(os.environ)
    order = ["new", "base", "ref"] + (["best"] if args.best else [])
    runs, mins = {k: [] for k in order}, {k: [] for k in order}
    loads = []
    dline, vxj, refs = "", None, {}  # refs: the last run of each reference mode ("ref", "best")
    for r in range(args.rounds):
        for who in order[r % len(order):] + order[:r % len(order)]:
            loads.append(loadavg())
            if who in ("ref", "best"):
                j = refs[who] = reference(args.config, vxj["batch"] if vxj else 2, iters, warmup, python,
                                          best=who == "best", amp=args.amp)
            else:
                j, d = vx_step(args.bin if who == "new" else args.base, args.config, iters, warmup, env, args.amp)
                if who == "new":
                    vxj, dline = j, d
            runs[who].append(j["step_ms_median"])
            mins[who].append(j["step_ms_min"])
            print("round %d %-4s %9.1f ms (fastest %.1f)  (load %.2f)" % (r + 1, who, runs[who][-1], mins[who][-1],
                                                                       loads[-1]), flush=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    best = {k: min(v) for k, v in mins.items()}
    ptj, bestj = refs["ref"], refs.get("best")
    stem = os.path.splitext(os.path.basename(args.config))[0]
    res = {"config": stem, "rounds": args.rounds, "iters": iters, "warmup": warmup, "step_ms": runs,
           "step_ms_min": mins, "median_ms": med, "fastest_ms": best,
           "ratio_fastest_reference_over_new": best["ref"] / best["new"],
           "ratio_fastest_reference_over_base": best["ref"] / best["base"], "load_avg": loads, "device_line": dline, "cpu": vxj["cpu"], "threads": vxj["threads"],
           "batch": vxj["batch"], "commit": vxj["commit"], "reference": ptj["framework"],
           "ratio_reference_over_new": med["ref"] / med["new"], "ratio_reference_over_base": med["ref"] / med["base"],
           "ratio_base_over_new": med["base"] / med["new"], "base_label": args.label, "amp": args.amp}
    # what holds the reference below the CPU's ISA (the AVX2 type on an AVX-512 CPU); torch's output does not say
    caps = isa_env.current()
    if caps:
        res["isa_env"] = caps
    best_name = ""
    if bestj:
        best_name = "%s, %s" % (bestj["framework"], bestj.get("mode", "best"))
        res.update({"reference_best": best_name, "ratio_best_over_new": med["best"] / med["new"],
                    "ratio_best_over_base": med["best"] / med["base"],
                    "ratio_fastest_best_over_new": best["best"] / best["new"],
                    "ratio_fastest_best_over_base": best["best"] / best["base"]})
    dev = os.path.join(args.results, vxj["device"], *(["bf16"] if args.amp == "bf16" else []))
    suffix = "_bf16" if args.amp == "bf16" else ""
    os.makedirs(dev, exist_ok=True)
    heads = dict(zip(order, ["this build (%s)" % vxj["commit"], args.label or "base", ptj["framework"], best_name]))
    row = lambda name, cells: "| %s | %s |" % (name, " | ".join(cells))

    def ratios(figs, what):  # each reference's time over this build's and over the base build's
        return [row("%s / this build (%s)" % (heads[ref], what), ["**%.2fx**" % (figs[ref] / figs["new"]),
                    "%.2fx" % (figs[ref] / figs["base"])] + [""] * (len(order) - 2)) for ref in order[2:]]

    md = (["# %s: this build, %s and %s, alternating, same machine, same run" % (
               stem, args.label or "the base build", " and ".join(heads[k] for k in order[2:])), "",
           row("", [heads[k] for k in order]), "|---|" + "---|" * len(order),
           row("step time, median of %d rounds (each the median of %d steps)" % (args.rounds, iters),
               ["%.1f ms" % med[k] for k in order]),
           row("per round", [" ".join("%.0f" % x for x in runs[k]) for k in order])] +
          ratios(med, "medians") + [row("fastest step of all rounds", ["%.1f ms" % best[k] for k in order])] +
          ratios(best, "fastest steps"))
    precision = "fp32" if args.amp == "off" else "voxscale --amp bf16 against the reference's bf16 autocast"
    md += ["", "Batch %d, %s, %d threads, CPU %s; load average (1 min) before each run: %s (2 cores, shared)." % (
              vxj["batch"], precision, vxj["threads"], vxj["cpu"], " ".join("%.1f" % x for x in loads)),
           "", "This build's `%s`" % dline.replace("|", "/"), ""]
    if caps:
        md[-1:] = ["", "The reference's ISA held by the environment: %s." % isa_env.describe(caps, ", "), ""]
    text = "\n".join(md)
    with open(os.path.join(dev, "alternate_%s%s.md" % (stem, suffix)), "w") as f:
        f.write(text)
    with open(os.path.join(dev, "alternate_%s%s.json" % (stem, suffix)), "w") as f:
        json.dump(res, f, indent=1)
    print(text)


if __name__ == "__main__":
    main()
