#!/usr/bin/env python3
"""ci/gpu/amp_table.py --out OUT.md [--json OUT.json] [--dtype bf16] [--modes eager,compile] PYTORCH.jsonl
VOXSCALE_STEP.json...: issue 12's mixed-precision comparison for one config, from one call of ci/gpu.sh's amp-* step
on one GPU: voxscale `bench step --amp bf16 --compile` (the contender; `--amp bf16` eager beside it shows what the
graph buys) against bench/reference/ae3d.py in PyTorch (bf16 autocast, channels_last_3d, fused AdamW; eager and
torch.compile; the JSON lines it prints as each run finishes, so what finished before a time limit still counts).
Where PyTorch ran a mode with cudnn.benchmark off and on, its faster run is the baseline and the other is listed.

Writes OUT.md (times, samples/s, speed-ups, peak memory, voxscale's step breakdown, and a verdict per goal) and
OUT.json (the same verdicts, for machines), and prints the step's key figure, one line. The goals (GOALS below):
samples/s at least 1.5x PyTorch eager and 1.2x torch.compile at the same batch, peak memory no higher than
PyTorch's (the lower of its runs), and voxscale's step within 1.15x of the sum of its cuDNN convolution times. A
missed goal is reported with the margin and voxscale's breakdown, not turned into a failure: exit 1 means a result
is missing or not comparable (no voxscale --compile result at the dtype, a PyTorch run of an expected mode missing,
another batch, a GPU run without its peak memory), 0 otherwise."""
import argparse
import json
import sys

# (key, what, threshold): the three ratios are "at least", the memory one "at most"
GOALS = [("vs_eager", "samples/s vs PyTorch eager", 1.5), ("vs_compile", "samples/s vs PyTorch torch.compile", 1.2),
         ("memory", "peak memory vs PyTorch", 1.0), ("conv_bound", "step time vs its cuDNN convolutions", 1.15)]
# what this script reads from each PyTorch line (tests/integration/test_reference_bench.py checks ae3d.py prints
# them) and from voxscale's bench step JSON; precision and compile default to older results' fp32 and 0, and the
# per-step breakdown is optional (shown as "-")
PT_FIELDS = ("mode", "dtype", "channels_last", "batch", "iters", "step_ms_median", "samples_per_s",
             "peak_memory_mib", "gpu", "framework", "cudnn")
VX_FIELDS = ("config", "batch", "input_size", "iters", "step_ms_median", "samples_per_s", "peak_memory_mib",
             "device_detail", "commit")
BREAKDOWN = ("forward_ms", "backward_ms", "optimizer_ms", "conv_ms", "own_kernels_ms")
MODES = ("eager", "compile")


def fmt(v, spec="%.2f", unit=""):
    return "-" if v is None else (spec % v) + unit


def load_voxscale(paths):
    """{"compile": result, "eager": result} from bench step JSON files, keyed by their compile field."""
    vx, problems = {}, []
    for p in paths:
        try:
            r = json.load(open(p))
        except (OSError, ValueError) as e:
            problems.append("unreadable voxscale result %s (%s)" % (p, e))
            continue
        lacking = [k for k in VX_FIELDS if k not in r]
        if lacking:
            problems.append("voxscale result %s lacks %s" % (p, ", ".join(lacking)))
            continue
        r.setdefault("precision", "fp32")
        r.setdefault("compile", 0)
        vx["compile" if r["compile"] else "eager"] = r
    return vx, problems


def load_pytorch(path, dtype):
    """PyTorch's fastest line per mode at this dtype from ae3d.py's output (the baseline is PyTorch at its best:
    of its cudnn.benchmark settings, the one that ran faster), and every line of the dtype (lines of other dtypes
    are not this table's)."""
    runs, lines_of_dtype, problems = {}, [], []
    try:
        with open(path) as f:
            lines = [json.loads(l) for l in f if l.startswith("{")]
    except (OSError, ValueError) as e:
        return {}, [], ["no PyTorch result in %s (%s)" % (path, e)]
    for r in lines:
        lacking = [k for k in PT_FIELDS if k not in r]
        if lacking:
            problems.append("a PyTorch line lacks %s" % ", ".join(lacking))
        elif r["dtype"] == dtype:
            r.setdefault("cudnn_benchmark", 0)
            best = runs.get(r["mode"])
            if best is None or r["samples_per_s"] > best["samples_per_s"]:
                runs[r["mode"]] = r
            lines_of_dtype.append(r)
    return runs, lines_of_dtype, problems


def ratio_verdict(got, need):
    """PASS, or by how much `got` (a ratio that should be at least `need`) falls short."""
    if got >= need:
        return "PASS", "PASS"
    short = need / got - 1
    return ("MISSED by %.1f%%: needs %.2fx, %.1f%% more samples/s" % (100 * (1 - got / need), need, 100 * short),
            "MISSED (%.2fx of %.2fx)" % (got, need))


def evaluate(vxc, pt, modes, unusable):
    """One dict per goal: goal, target, measured, verdict (PASS / MISSED ... / not run / not measured), short.
    unusable: {mode: why} for PyTorch runs that finished but cannot be compared."""
    out = []
    for key, what, need in GOALS:
        g = {"goal": key, "what": what, "threshold": need, "measured": None, "ratio": None}
        if key in ("vs_eager", "vs_compile"):
            mode = key[3:]
            g["target"] = ">= %.2fx" % need
            if mode not in modes:
                g["verdict"] = g["short"] = "not run (PyTorch %s not asked for in this run)" % mode
            elif mode not in pt:
                g["verdict"] = g["short"] = "no result (PyTorch %s %s)" % (mode, unusable.get(mode, "did not finish"))
            else:
                g["ratio"] = vxc["samples_per_s"] / pt[mode]["samples_per_s"]
                g["measured"] = "%.2fx (%.1f vs %.1f samples/s)" % (g["ratio"], vxc["samples_per_s"],
                                                                   pt[mode]["samples_per_s"])
                g["verdict"], g["short"] = ratio_verdict(g["ratio"], need)
        elif key == "memory":
            peaks = {m: pt[m]["peak_memory_mib"] for m in MODES if m in pt and pt[m]["peak_memory_mib"] is not None}
            if not peaks:
                g["target"] = "<= PyTorch"
                g["verdict"] = g["short"] = "not measured (no PyTorch peak memory)"
            else:
                low = min(peaks, key=peaks.get)
                g["target"] = "<= %.0f MiB (PyTorch %s, the lower)" % (peaks[low], low)
                g["ratio"] = vxc["peak_memory_mib"] / peaks[low]
                g["measured"] = "%.0f MiB (%s)" % (vxc["peak_memory_mib"], ", ".join(
                    "PyTorch %s %.0f MiB" % (m, peaks[m]) for m in MODES if m in peaks))
                if g["ratio"] <= need:
                    g["verdict"] = g["short"] = "PASS"
                else:
                    over = vxc["peak_memory_mib"] - peaks[low]
                    g["verdict"] = "MISSED by %.0f MiB (%.1f%% above PyTorch %s)" % (over, 100 * (g["ratio"] - 1), low)
                    g["short"] = "MISSED (+%.0f MiB)" % over
        else:
            conv = vxc.get("conv_ms")
            if conv is None or conv <= 0:
                g["target"] = "<= %.2f x conv_ms" % need
                g["verdict"] = g["short"] = "not measured (no conv_ms in voxscale's result)"
            else:
                g["target"] = "<= %.2f ms (%.2f x conv_ms %.2f)" % (need * conv, need, conv)
                g["ratio"] = vxc["step_ms_median"] / conv
                g["measured"] = "%.2f ms = %.2f x conv_ms" % (vxc["step_ms_median"], g["ratio"])
                if g["ratio"] <= need:
                    g["verdict"] = g["short"] = "PASS"
                else:
                    over = vxc["step_ms_median"] - need * conv
                    g["verdict"] = "MISSED by %.2f ms (%.1f%% over the bound)" % (over, 100 * (g["ratio"] / need - 1))
                    g["short"] = "MISSED (%.2fx)" % g["ratio"]
        out.append(g)
    return out


def breakdown_line(r):
    """Where voxscale's step goes: convolutions, own kernels, and the step's time with the GPU busy with neither."""
    conv, own = r.get("conv_ms"), r.get("own_kernels_ms")
    if conv is None or own is None:
        return None
    idle = r["step_ms_median"] - conv - own
    return ("convolutions %.2f ms (%.0f%%), own kernels %.2f ms (%.0f%%), GPU not busy with either (launch gaps, "
            "host waits) %.2f ms (%.0f%%) of the %.2f ms step" % (conv, 100 * conv / r["step_ms_median"], own,
                                                                100 * own / r["step_ms_median"], idle,
                                                                100 * idle / r["step_ms_median"], r["step_ms_median"]))


def table(vx, pt, pt_lines, goals, dtype):
    cols = [("voxscale %s --compile" % dtype, vx.get("compile")), ("voxscale %s eager" % dtype, vx.get("eager")),
            ("PyTorch %s eager" % dtype, pt.get("eager")), ("PyTorch %s torch.compile" % dtype, pt.get("compile"))]
    head = vx["compile"]
    md = ["# %s: voxscale %s + CUDA graph vs PyTorch %s autocast, same GPU, same call" % (head["config"], dtype, dtype),
          "", "| | " + " | ".join(c for c, _ in cols) + " |", "|---|" + "---|" * len(cols)]

    def row(label, f):
        md.append("| %s | %s |" % (label, " | ".join("-" if r is None else f(r) for _, r in cols)))

    row("step (median)", lambda r: "%.2f ms (of %d)" % (r["step_ms_median"], r["iters"]))
    row("samples/s", lambda r: "%.1f" % r["samples_per_s"])
    row("voxscale --compile speed-up (samples/s)",
        lambda r: "" if r is head else "%.2fx" % (head["samples_per_s"] / r["samples_per_s"]))
    row("peak memory", lambda r: fmt(r["peak_memory_mib"], "%.0f", " MiB") + (
        " (steady %.0f)" % r["peak_memory_steady_mib"] if r.get("peak_memory_steady_mib") is not None else ""))
    for k in BREAKDOWN:
        row(k.replace("_ms", "").replace("_", " ") + " per step", lambda r, k=k: fmt(r.get(k), "%.2f", " ms"))
    row("step / conv_ms", lambda r: "%.2fx" % (r["step_ms_median"] / r["conv_ms"]) if r.get("conv_ms") else "-")
    row("cudnn.benchmark", lambda r: "" if "mode" not in r else ("on" if r.get("cudnn_benchmark") else "off"))
    if "compile" in pt:
        md.append("| torch.compile warm-up (compilation, mostly) | | | | %s |" % fmt(pt["compile"].get("warmup_s"),
                                                                                   "%.0f", " s"))
    chosen = [id(r) for r in pt.values()]
    rest = ["%s cudnn.benchmark %s: %.2f ms, %.1f samples/s" % (r["mode"], "on" if r["cudnn_benchmark"] else "off",
                                                             r["step_ms_median"], r["samples_per_s"])
            for r in pt_lines if id(r) not in chosen]
    if rest:
        md += ["", "PyTorch's columns are its faster cudnn.benchmark setting per mode; the others: %s."
               % "; ".join(rest)]
    md += ["", "| goal | target | measured | verdict |", "|---|---|---|---|"]
    for g in goals:
        md.append("| %s | %s | %s | %s |" % (g["what"], g["target"], g["measured"] or "-", g["verdict"]))
    why = breakdown_line(head)
    if any(g["verdict"].startswith("MISSED") for g in goals):
        md += ["", "Where voxscale's --compile step goes (its own breakdown; PyTorch's is not measured here): %s."
               % (why or "no breakdown in its result")]
    some = next(iter(pt.values()), {})
    md += ["", "Batch %d of %s; voxscale %s (precision %s), commit %s, timed with CUDA events; %s (cuDNN %s, "
           "channels_last_3d %s, %s, %s autocast around forward and loss), wall clock around synchronized "
           "steps. One step = forward, L1+KL loss, backward, global-norm clip, AdamW. voxscale's peak memory counts "
           "its own allocations (arena, parameters, gradients, AdamW state); PyTorch's is "
           "torch.cuda.max_memory_allocated since a reset before the model was built (steady: the timed steps "
           "alone); the memory goal is judged against the lower PyTorch figure."
           % (head["batch"], "x".join(map(str, head["input_size"])), head["device_detail"], head["precision"],
              head["commit"], some.get("framework", "PyTorch: no result"), some.get("cudnn"),
              "on" if some.get("channels_last") else "off",
              "fused AdamW" if some.get("fused_adamw", 1) else "AdamW, not fused", dtype)]
    return md


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the Markdown table")
    ap.add_argument("--json", help="the verdicts as JSON")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--modes", default="eager,compile", help="the PyTorch modes the step asked for")
    ap.add_argument("pytorch")
    ap.add_argument("voxscale", nargs="+")
    a = ap.parse_args()
    modes = a.modes.split(",")
    vx, problems = load_voxscale(a.voxscale)
    pt, pt_lines, pt_problems = load_pytorch(a.pytorch, a.dtype)
    problems += pt_problems
    head = vx.get("compile")
    if head is None:
        print("; ".join(problems + ["no voxscale --compile result"]))
        return 1
    for which, r in vx.items():
        if r["precision"] != a.dtype:
            problems.append("voxscale %s ran in %s, not %s" % (which, r["precision"], a.dtype))
    unusable = {}
    for m in modes:
        if m not in pt:
            problems.append("no PyTorch %s %s result" % (a.dtype, m))
        elif pt[m]["batch"] != head["batch"]:
            problems.append("PyTorch %s ran batch %d, voxscale %d" % (m, pt[m]["batch"], head["batch"]))
            unusable[m] = "ran another batch"
            del pt[m]
        elif pt[m].get("device") != "cpu" and pt[m]["peak_memory_mib"] is None:
            problems.append("PyTorch %s has no peak memory" % m)
    goals = evaluate(head, pt, modes, unusable)
    md = table(vx, pt, pt_lines, goals, a.dtype)
    if problems:
        md += ["", "Incomplete: " + "; ".join(problems) + "."]
    with open(a.out, "w") as f:
        f.write("\n".join(md) + "\n")
    passed = sum(g["verdict"] == "PASS" for g in goals)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": head["config"], "batch": head["batch"], "dtype": a.dtype, "goals": goals,
                       "passed": passed, "problems": problems, "voxscale": vx, "pytorch": pt}, f, indent=2)
            f.write("\n")
    # the key figure: what was measured, then the verdicts
    sp = ", ".join("%.2fx PyTorch %s" % (head["samples_per_s"] / pt[m]["samples_per_s"], m) for m in MODES if m in pt)
    line = "%s %s batch %d: voxscale --compile %.2f ms, %.1f samples/s%s; peak %.0f MiB; goals %d/%d PASS" % (
        head["config"], a.dtype, head["batch"], head["step_ms_median"], head["samples_per_s"],
        " = " + sp if sp else "", head["peak_memory_mib"], passed, len(goals))
    others = ["%s %s" % (g["goal"], g["short"]) for g in goals if g["verdict"] != "PASS"]
    if others:
        line += " (" + "; ".join(others) + ")"
    if problems:
        line += "; incomplete: " + "; ".join(problems)
    print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
