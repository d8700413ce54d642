#!/usr/bin/env python3
"""bucket_timeline.py RUN_DIR [--step N] [--json FILE]: when each gradient bucket's all-reduce ran against the
step's backward, from a data-parallel run's --profile trace (rank 0's) and metrics.jsonl (train.log_every=1).

The all-reduces are the CPU communicators' events ("allreduce", category comm, on the "gradient all-reduce" track)
or, on GPUs, NCCL's kernels as CUPTI records them (names starting ncclDevKernel / ncclKernel). Times are in ms from
the start of the step's backward range. The summary gives how many all-reduces started before backward ended (the
overlap), their summed time, and the step's comm_wait_ms: with overlap the optimizer waits for less than the sum.
This is the measured input of the scaling projection (bench scaling): when backward makes each bucket ready, how long
its all-reduce takes on this interconnect. Used by tests/integration/test_distributed.py and ci/gpu.sh.
--require-overlap N: exit 1, with one line, unless at least N all-reduces started while backward ran: evidence that
buckets overlap backward, which a run measuring nothing cannot pass (one NCCL rank launches no kernel for an in-place
sum: 0 all-reduces)."""
import sys
import argparse
import glob
import gzip
import json
import os


def is_allreduce(e):
    name = e.get("name", "")
    return (e.get("cat") == "comm" and name == "allreduce") or \
        (e.get("cat") == "kernel" and (name.startswith("ncclDevKernel") or name.startswith("ncclKernel")))


def timeline(run_dir, step=None):
    [path] = sorted(glob.glob(os.path.join(run_dir, "traces", "*.pt.trace.json.gz")))[-1:] or [None]
    if path is None:
        raise SystemExit("bucket_timeline.py: no trace in %s: run voxscale train with --profile" % run_dir)
    events = [e for e in json.load(gzip.open(path, "rt"))["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    if step is not None:
        steps = [e for e in steps if e["name"] == "ProfilerStep#%d" % step]
    if not steps:
        raise SystemExit("bucket_timeline.py: no profiled step%s in %s" % (" %d" % step if step else "", path))
    s = steps[-1]
    n = int(s["name"].split("#")[1])
    inside = lambda e: s["ts"] <= e["ts"] <= s["ts"] + s["dur"]
    backward = [e for e in events if e.get("name") == "backward" and inside(e)]
    if not backward:
        raise SystemExit("bucket_timeline.py: step %d has no backward range" % n)
    bw = backward[0]
    reduces = sorted((e for e in events if is_allreduce(e) and inside(e)), key=lambda e: e["ts"])
    metrics = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m.get("step") == n and "comm_wait_ms" in m:
                metrics = m
    rows = [{"start_ms": (e["ts"] - bw["ts"]) / 1e3, "ms": e["dur"] / 1e3, "name": e["name"],
             "args": e.get("args", {})} for e in reduces]
    bw_end = bw["dur"] / 1e3
    return {"step": n, "backward_ms": bw_end, "allreduces": rows,
            "started_during_backward": sum(1 for r in rows if 0 <= r["start_ms"] < bw_end),
            "allreduce_ms_total": sum(r["ms"] for r in rows), "comm_wait_ms": metrics.get("comm_wait_ms"),
            "step_ms": metrics.get("step_ms")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--step", type=int)
    ap.add_argument("--json")
    ap.add_argument("--require-overlap", type=int, default=0, metavar="N")
    a = ap.parse_args()
    t = timeline(a.run_dir, a.step)
    print("step %d: backward %.3f ms; %d all-reduces, %d started during backward, %.3f ms in all; comm wait %s ms"
          % (t["step"], t["backward_ms"], len(t["allreduces"]), t["started_during_backward"], t["allreduce_ms_total"],
             "%.3f" % t["comm_wait_ms"] if t["comm_wait_ms"] is not None else "?"))
    for i, r in enumerate(t["allreduces"]):
        print("  %2d  start %+9.3f ms  %8.3f ms  %s" % (i + 1, r["start_ms"], r["ms"], r["name"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(t, f, indent=2)
    if a.require_overlap and t["started_during_backward"] < a.require_overlap:
        print("bucket_timeline.py: no overlap evidence: %d all-reduces in step %d, %d of them started during backward "
              "(at least %d required)%s" % (len(t["allreduces"]), t["step"], t["started_during_backward"],
                                            a.require_overlap, "; nothing was measured (one rank?)"
                                            if not t["allreduces"] else ""))
        sys.exit(1)


if __name__ == "__main__":
    main()
