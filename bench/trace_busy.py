#!/usr/bin/env python3
"""trace_busy.py RUN_DIR [--min F] [--max F] [--json FILE]: how much of each profiled training step the GPU was busy,
from the run's --profile trace (CUPTI's kernels, copies and memsets) against the step time the CUDA events measured
(metrics.jsonl's step_ms; the run needs train.log_every=1).

Per ProfilerStep#N range: busy = the union of the device intervals (kernel, gpu_memcpy, gpu_memset events) that
start inside the range (the range closes after the step's device work has finished, so every device interval of the
step lies inside it and none of another step's does); kernels = their summed kernel time. The step's GPU window is
step_ms less data_wait_ms: the step's first event is recorded before the host waits for the data loader, and the
GPU is idle through that wait. fraction = busy / GPU window. Busy time cannot exceed the window the events bracket,
so a fraction far above 1 means device records on another clock or in the wrong step; far below 1, that the GPU
waits for the host (launch gaps, the loss readback between forward and backward) or that records are missing.

Prints one line per step; with --min/--max exits 1 when a step's fraction is outside [min, max]. Used by
tests/integration/test_cuda.py and ci/gpu.sh's profile step."""
import argparse
import glob
import gzip
import json
import os
import sys

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def union_us(intervals):
    """Total length of the union of [start, end) intervals (microseconds)."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def load(run_dir):
    """(trace dict, {step: metrics line}) of a run directory written with --profile and train.log_every=1."""
    paths = sorted(glob.glob(os.path.join(run_dir, "traces", "*.pt.trace.json.gz")))
    if not paths:
        raise SystemExit("trace_busy.py: no traces/*.pt.trace.json.gz in %s: run voxscale train with --profile" % run_dir)
    with gzip.open(paths[-1], "rt") as f:
        trace = json.load(f)
    steps = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "step_ms" in m:
                steps[m["step"]] = m
    return trace, steps


def busy_per_step(trace, steps):
    """One dict per profiled step: step, step_ms, data_wait_ms, window_ms, busy_ms, kernel_ms, kernels, fraction,
    raw_fraction (busy / step_ms, the data wait included)."""
    xs = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    device = [e for e in xs if e.get("cat") in DEVICE_CATS]
    out = []
    for r in sorted((e for e in xs if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"]):
        step = int(r["name"].split("#")[1])
        if step not in steps:
            raise SystemExit("trace_busy.py: ProfilerStep#%d has no step_ms in metrics.jsonl (log_every=1 needed)" % step)
        inside = [e for e in device if r["ts"] <= e["ts"] <= r["ts"] + r["dur"]]
        kernels = [e for e in inside if e["cat"] == "kernel"]
        busy = union_us((e["ts"], e["ts"] + e["dur"]) for e in inside) / 1e3
        step_ms = float(steps[step]["step_ms"])
        wait_ms = float(steps[step].get("data_wait_ms", 0.0))
        window = max(step_ms - wait_ms, 1e-9)
        out.append({"step": step, "step_ms": step_ms, "data_wait_ms": wait_ms, "window_ms": window, "busy_ms": busy,
                    "kernel_ms": sum(e["dur"] for e in kernels) / 1e3, "kernels": len(kernels),
                    "fraction": busy / window, "raw_fraction": busy / step_ms if step_ms > 0 else 0.0})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--min", type=float, help="fail when a step's busy fraction of its GPU window is below this")
    ap.add_argument("--max", type=float, help="fail when it is above this")
    ap.add_argument("--json", help="also write the per-step figures here")
    a = ap.parse_args()
    trace, steps = load(a.run_dir)
    rows = busy_per_step(trace, steps)
    if not rows:
        raise SystemExit("trace_busy.py: the trace has no ProfilerStep ranges")
    bad = 0
    for r in rows:
        ok = (a.min is None or r["fraction"] >= a.min) and (a.max is None or r["fraction"] <= a.max)
        bad += not ok
        print("step %d: step %.2f ms (data wait %.2f) | GPU busy %.2f ms = %.1f%% of its window, %.1f%% of the step | "
              "%d kernels, %.2f ms%s" % (r["step"], r["step_ms"], r["data_wait_ms"], r["busy_ms"], 100 * r["fraction"],
                                          100 * r["raw_fraction"], r["kernels"], r["kernel_ms"], "" if ok else "  <- out of bounds"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)
    if bad:
        print("trace_busy: %d of %d steps outside [%s, %s]" % (bad, len(rows), a.min, a.max))
        sys.exit(1)


if __name__ == "__main__":
    main()
