#!/usr/bin/env python3
"""bench/zero_modes.py: memory per rank and step time by data-parallel mode (DDP, ZeRO-1, ZeRO-2, and ZeRO-2 with
the optimizer offloaded) at several numbers of CPU MPI ranks, for the README's table.

  python3 bench/zero_modes.py [--config configs/resnet3d-18-cls.json] [--ranks 1,2,4] [--steps 8]
                              [--global-batch 8] [--modes DDP,ZeRO-1,ZeRO-2,ZeRO-2+offload] [--results results]
                              [--bin build/voxscale]

Each (ranks, mode) trains --steps steps under mpirun (one thread per rank when the ranks fill the cores, the cores
shared otherwise) at a fixed global batch, so every row trains the same model; the step time is the median of rank
0's step_ms after the first two steps, and the bytes are every rank's allocator counters (the `memory: rank r/N`
lines), beside the plan's. On CPU ranks offload changes nothing (the optimizer state is host memory already): its row
forces the offload path (VX_TEST_OFFLOAD_ON_CPU: host copies, adamw_cpu) and says so. The load average before and
after is recorded: these 2-core VMs are shared, and a busy machine moves the times, not the bytes. Writes
results/<device>/zero_modes_<config>.json and .md (<device> as bench/memory.py learns it)."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory import commit, device_folder  # noqa: E402  (the same folder naming and commit as the memory table)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl_vader_single_copy_mechanism", "none"]
MODES = {"DDP": ["--zero", "0"], "ZeRO-1": ["--zero", "1"], "ZeRO-2": ["--zero", "2"],
         "ZeRO-2+offload": ["--zero", "2", "--set", "dist.offload_optimizer=cpu"]}
MEMORY = re.compile(r"memory: rank (\d+)/(\d+) \(([^)]+)\), allocator: parameters (\d+), gradients (\d+), "
                    r"optimizer state (\d+), activations (\d+) bytes; plan: (\d+), (\d+), (\d+), (\d+)")
MIB = 1048576.0


def loadavg():
    return [round(float(x), 2) for x in open("/proc/loadavg").read().split()[:3]]


def measure(binary, config, ranks, mode, steps, global_batch, scratch):
    out = os.path.join(scratch, "%d-%s" % (ranks, mode.replace("+", "-")))
    cores = os.cpu_count() or 1
    threads = max(1, cores // ranks)
    args = [binary, "train", "--config", config, "--device", "cpu", "--steps", str(steps), "--out", out,
            "--threads", str(threads), "--set", "train.global_batch=%d" % global_batch, "--set", "train.val_every=0",
            "--set", "train.val_samples=0", "--set", "output.tensorboard=0", "--set", "train.log_every=1",
            *MODES[mode]]
    env = dict(os.environ, VX_TEST_OFFLOAD_ON_CPU="1") if "offload" in mode else None
    p = subprocess.run([*MPIRUN, "-np", str(ranks), *args], cwd=ROOT, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("zero_modes: %d ranks %s exited %d:\n%s" % (ranks, mode, p.returncode, (p.stdout + p.stderr)[-3000:]))
    mem = {}
    for m in MEMORY.finditer(p.stdout):
        v = [int(x) for x in m.groups()[3:]]
        mem[int(m.group(1))] = {"allocator": v[:4], "plan": v[4:]}
    if sorted(mem) != list(range(ranks)):
        sys.exit("zero_modes: not every rank printed its memory line:\n" + p.stdout[-3000:])
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
    times = [r["step_ms"] for r in rows if "step_ms" in r and r["step"] > 2]
    comm = [r.get("comm_wait_ms", 0.0) for r in rows if "step_ms" in r and r["step"] > 2]
    slot = [r["slot_wait_ms"] for r in rows if "slot_wait_ms" in r and r["step"] > 2]  # ZeRO-2 on CPU ranks
    return {"ranks": ranks, "mode": mode, "threads_per_rank": threads,
            "batch_per_rank": global_batch // ranks, "step_ms": statistics.median(times),
            "step_ms_min": min(times), "comm_wait_ms": statistics.median(comm),
            "slot_wait_ms": statistics.median(slot) if slot else None,
            "bytes_per_rank": mem, "allocator_equals_plan": all(r["allocator"] == r["plan"] for r in mem.values()),
            "final_loss": [r["loss"] for r in rows if "loss" in r][-1]}


def markdown(doc):
    lines = ["# data-parallel modes: %s on %s" % (doc["config"], doc["device"]), "",
             "| ranks | mode | parameters | gradients | optimizer state | activations | device total | step (median) "
             "| comm wait | slot wait | final loss |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        p, g, o, a = r["bytes_per_rank"][0]["allocator"]
        slot = "%.1f ms" % r["slot_wait_ms"] if r.get("slot_wait_ms") is not None else "-"
        lines.append("| %d | %s | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f ms | %.1f ms | %s | %.6f |" % (
            r["ranks"], r["mode"], p / MIB, g / MIB, o / MIB, a / MIB, (p + g + o + a) / MIB, r["step_ms"],
            r["comm_wait_ms"], slot, r["final_loss"]))
    lines += ["", "Bytes: rank 0's allocator counters (every rank's equal the plan's: %s). Step: median of rank 0's "
              "step_ms over steps 3-%d; global batch %d at every rank count (per rank: batch / ranks), %s. "
              "Comm wait: the optimizer's wait for the buckets in flight; slot wait (ZeRO-2): backward's waits for a "
              "staging slot whose last reduce-scatter was still running, which the comm wait does not count. "
              "On CPU ranks offload changes nothing; its row forces the offload path (VX_TEST_OFFLOAD_ON_CPU: host "
              "copies and adamw_cpu), so its time is that path's cost, its optimizer state the device's (none: it "
              "lives in host memory). Load average before / after: %s / %s (2 cores, shared). Commit %s." % (
                  "yes" if all(r["allocator_equals_plan"] for r in doc["rows"]) else "NO", doc["steps"],
                  doc["global_batch"], doc["threads"], doc["load_before"], doc["load_after"], doc["commit"])]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/resnet3d-18-cls.json")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--results", default=os.path.join(ROOT, "results"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "voxscale"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        device = device_folder(a.bin, "cpu", os.path.join(scratch, "dev"))
        before = loadavg()
        rows = []
        for ranks in [int(x) for x in a.ranks.split(",")]:
            for mode in a.modes.split(","):
                r = measure(a.bin, a.config, ranks, mode, a.steps, a.global_batch, scratch)
                print("%d ranks %-15s step %.1f ms, rank 0 bytes %s" % (ranks, mode, r["step_ms"],
                                                                      r["bytes_per_rank"][0]["allocator"]), flush=True)
                rows.append(r)
        after = loadavg()
    name = os.path.splitext(os.path.basename(a.config))[0]
    doc = {"config": a.config, "device": device, "steps": a.steps, "global_batch": a.global_batch,
           "threads": "threads per rank = cores / ranks (at least 1)", "load_before": before, "load_after": after,
           "commit": commit(a.bin), "rows": rows}
    folder = os.path.join(a.results, device)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "zero_modes_%s.json" % name), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(folder, "zero_modes_%s.md" % name), "w") as f:
        f.write(markdown(doc))
    print("wrote %s/zero_modes_%s.json and .md" % (folder, name))


if __name__ == "__main__":
    main()
