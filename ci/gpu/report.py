#!/usr/bin/env python3
"""ci/gpu/report.py WORK OUTDIR MODE DRY: ci/gpu.sh's reports from its bookkeeping in WORK (run after every step, so
they hold whatever has run so far):
  WORK/steps.tsv   one line per registered step run or left out: name, result (pass, fail, timeout, owed, not run),
                   seconds, limit, exit code, what it checks, key figure
  WORK/env.json    ci/gpu/env.py's record of the machine
  WORK/logs/       one log per step
writes OUTDIR/summary.md (the environment, one row per step: result, time, key figure; then the tail of each
failed step's log) and OUTDIR/summary.json (the same, for machines). MODE is "full", "first" or "quick", with
" dry-run" after it for a dry run (DRY 1). Each step that ran gets a suggested limit from its measured time
(1.5 x the time + 5 s; twice the limit for one that timed out): what to register in ci/gpu.sh once a GPU has run it.
The verdict is PASS only when every step run passed: an owed step (what it could check passed, the rest needs what
the machine lacks) makes it OWED, a failed or timed-out one FAIL."""
import json
import math
import os
import sys


def suggested_limit(s):
    if s["result"] in ("not run",):
        return None
    if s["result"] == "timeout":
        return 2 * s["limit_s"]
    return max(5, int(math.ceil(1.5 * s["seconds"] + 5)))

TAIL_LINES = 25  # of a failed step's log in summary.md: enough for a cuDNN or sanitizer error and its context
ENV_ORDER = ["gpu", "gpus", "driver", "driver_cuda", "nvcc", "cudnn", "cupti", "cublas", "nccl", "torch", "torch_cuda",
             "torch_cudnn", "clocks", "power", "temperature", "persistence", "memory", "commit", "prepared",
             "host_cpu", "cores"]


def main():
    work, outdir, mode, dry = sys.argv[1:5]
    steps = []
    with open(os.path.join(work, "steps.tsv")) as f:
        for line in f:
            name, result, secs, limit, rc, what, figure = line.rstrip("\n").split("\t")
            steps.append({"step": name, "result": result, "seconds": float(secs), "limit_s": int(limit),
                          "exit_code": None if rc == "" else int(rc), "checks": what, "figure": figure,
                          "log": "logs/%s.log" % name})
            steps[-1]["suggested_limit_s"] = suggested_limit(steps[-1])
    env_path = os.path.join(work, "env.json")
    env = json.load(open(env_path)) if os.path.exists(env_path) else {"gpu": "unavailable: no env.json"}
    ran = [s for s in steps if s["result"] != "not run"]
    failed = [s for s in ran if s["result"] in ("fail", "timeout")]
    owed = [s for s in ran if s["result"] == "owed"]
    passed = [s for s in ran if s["result"] == "pass"]
    total = sum(s["seconds"] for s in steps)
    verdict = "FAIL" if failed or not ran else "OWED" if owed else "PASS"
    summary = {"mode": mode, "dry_run": dry == "1", "verdict": verdict, "steps_run": len(ran), "steps_failed": len(failed),
               "steps_owed": len(owed), "seconds": round(total, 1), "environment": env, "steps": steps}
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")

    md = ["# ci/gpu.sh (%s): %s, %d of %d steps passed%s in %.0f s" % (
        mode, verdict, len(passed), len(ran), ", %d owed" % len(owed) if owed else "", total), ""]
    if dry == "1":
        md += ["A dry run: every step's command was replaced by a stand-in, run under the smaller of its limit and "
               "%s s; no figure below was measured." % os.environ.get("VX_GPU_DRY_LIMIT", "5"), ""]
    md += ["| | |", "|---|---|"]
    for k in ENV_ORDER + sorted(set(env) - set(ENV_ORDER)):
        if k in env:
            md.append("| %s | %s |" % (k, str(env[k]).replace("|", "/")))
    md += ["", "| step | result | time | limit | suggested limit | key figure | checks |",
           "|---|---|---|---|---|---|---|"]
    for s in steps:
        mark = {"pass": "pass", "fail": "**FAIL**", "timeout": "**TIMEOUT**", "owed": "**OWED**"}.get(s["result"],
                                                                                                 s["result"])
        sug = "%d s" % s["suggested_limit_s"] if s["suggested_limit_s"] else ""
        md.append("| %s | %s | %.1f s | %d s | %s | %s | %s |" % (s["step"], mark, s["seconds"], s["limit_s"], sug,
                                                                s["figure"].replace("|", "/"), s["checks"]))
    measured = [s for s in ran if s["suggested_limit_s"]]
    if measured and dry != "1":
        md += ["", "Limits to register in ci/gpu.sh from these times (1.5 x the time + 5 s; twice the limit after a "
               "timeout): " + ", ".join("%s %d s" % (s["step"], s["suggested_limit_s"]) for s in measured) + "."]
    for s in failed + owed:
        md += ["", "## %s: %s (exit code %s), last lines of %s" % (s["step"], s["result"], s["exit_code"], s["log"]), "```"]
        try:
            with open(os.path.join(work, s["log"]), errors="replace") as f:
                md += [l.rstrip("\n") for l in f.readlines()[-TAIL_LINES:]]
        except OSError as e:
            md.append("(no log: %s)" % e)
        md.append("```")
    md += ["", "Logs of every step: logs.tar.gz (logs/<step>.log, and the steps' own files under steps/<step>/)."]
    with open(os.path.join(outdir, "summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
