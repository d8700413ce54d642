#!/usr/bin/env python3
"""bench/memory.py: planned against measured peak memory, per config and mode, for the report's memory chart.

  python3 bench/memory.py [--config configs/default.json ...] [--device cpu|cuda|auto] [--results results]
                          [--bin build/voxscale] [--modes fused,unfused,checkpointed] [--layers 6,12,24,48]

For each config and mode (fused: train.fuse=1, the default; unfused: train.fuse=0; checkpointed:
--checkpoint-activations) it asks `voxscale detect` for the plan (the arena with and without reuse, the parameters'
and optimizer's bytes, the planned peak), then trains one step and reads the backend's measured peak (metrics.jsonl's
peak_mib). Writes results/<device>/memory_<config>.json and .md; <device> is the folder voxscale's benchmarks write
to, learned from a one-size `bench allreduce` into a scratch folder (so it is their naming, not a copy of it).
For a densenet config, --layers adds the activation memory per dense layer: the planned arena of the config with one
dense block of each layer count (model.block_config [L]), activations stored and checkpointed (layer_sweep)."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = {"fused": [], "unfused": ["--set", "train.fuse=0"], "checkpointed": ["--checkpoint-activations"]}
PLAN = re.compile(r"^memory: arena ([\d.]+) MiB planned \(([\d.]+) MiB without reuse\) \+ ([\d.]+) MiB parameters, "
                  r"gradients and AdamW state = ([\d.]+) MiB peak", re.M)


def run(args, **kw):
    p = subprocess.run(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if p.returncode != 0:
        sys.exit("memory: %s exited %d:\n%s" % (" ".join(args), p.returncode, p.stdout[-2000:]))
    return p.stdout


def device_folder(binary, device, scratch):
    run([binary, "bench", "allreduce", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "--device", device,
         "--results", scratch])
    [name] = [d for d in os.listdir(scratch) if os.path.isdir(os.path.join(scratch, d))]
    return name


def commit(binary):
    """The commit the binary was built from (its `--version` line: git describe at build time, "-dirty" for a tree
    with changes), not this checkout's HEAD, which need not be what built it; VX_COMMIT overrides, as in voxscale."""
    if os.environ.get("VX_COMMIT"):
        return os.environ["VX_COMMIT"]
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.split("\n")[0].split()
    return out[1] if len(out) >= 2 and out[0] == "voxscale" else "unknown"


def measure(binary, config, device, mode, scratch):
    extra = MODES[mode]
    out = run([binary, "detect", "--config", config, "--device", device] + extra)
    m = PLAN.search(out)
    if not m:
        sys.exit("memory: no plan line in voxscale detect's output:\n" + out[-2000:])
    batch = int(re.search(r"batch (\d+) per rank", out).group(1))
    where = re.search(r"^device: (.*)$", out, re.M).group(1)
    # "device: cpu (requested ...); AMD EPYC, 2 threads, AVX-512, ...; GEMM: ...": what follows the choice
    detail = where.split("; ", 1)[1] if "; " in where else ""
    run_dir = os.path.join(scratch, "%s-%s" % (os.path.basename(config), mode))
    run([binary, "train", "--config", config, "--device", device, "--steps", "1", "--out", run_dir,
         "--set", "train.val_every=0", "--set", "output.tensorboard=0", "--set", "train.log_every=1"] + extra)
    peaks = [json.loads(l).get("peak_mib") for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    peaks = [p for p in peaks if p is not None]
    prec = re.search(r"^precision: (\S+)", out, re.M)
    return {"mode": mode, "batch": batch, "arena_mib": float(m.group(1)), "arena_without_reuse_mib": float(m.group(2)),
            "params_state_mib": float(m.group(3)), "planned_peak_mib": float(m.group(4)),
            "without_reuse_mib": round(float(m.group(2)) + float(m.group(3)), 2),
            "measured_peak_mib": max(peaks) if peaks else None, "device_choice": where,
            "detail": detail, "precision": prec.group(1) if prec else "?"}


SWEEP_BATCH = 4  # the layer sweep's batch: MONAI's stored scheme at 48 layers of 320x320 fits 24 GB at 4, not at 16


def layer_sweep(binary, config, device, counts):
    """The planned arena of one dense block of L layers, stored (train.checkpoint_activations=0: MONAI's memory) and
    checkpointed, for each L; and the MiB each added layer costs between the first and last count."""
    rows = []
    for layers in counts:
        row = {"layers": layers}
        for name, ck in (("stored", 0), ("checkpointed", 1)):
            out = run([binary, "detect", "--config", config, "--device", device, "--set", "train.batch_size=%d" % SWEEP_BATCH,
                       "--set", "model.block_config=[%d]" % layers, "--set", "train.checkpoint_activations=%d" % ck])
            # (the plan turns checkpointing on where the stored activations exceed the budget: no stored figure then)
            fits = "does not fit without it" not in out
            row[name + "_arena_mib"] = float(PLAN.search(out).group(1)) if fits else None
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", action="append", help="config file (repeatable; default configs/default.json)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--results", default=os.path.join(ROOT, "results"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "voxscale"))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--layers", default="6,12,24,48",
                    help="densenet configs: the layer counts of the one-block sweep (empty: none)")
    a = ap.parse_args()
    modes = a.modes.split(",")
    for m in modes:
        if m not in MODES:
            ap.error("--modes: no mode %r; choose from %s" % (m, ", ".join(MODES)))
    with tempfile.TemporaryDirectory(prefix="voxscale-memory-") as scratch:
        slug = device_folder(a.bin, a.device, os.path.join(scratch, "slug"))
        out_dir = os.path.join(a.results, slug)
        os.makedirs(out_dir, exist_ok=True)
        for config in a.config or ["configs/default.json"]:
            stem = os.path.splitext(os.path.basename(config))[0]
            rows = [measure(a.bin, config, a.device, m, scratch) for m in modes]
            doc = {"benchmark": "memory", "config": stem, "device": slug, "commit": commit(a.bin),
                   "device_detail": rows[0]["detail"], "precision": rows[0]["precision"], "rows": rows}
            with open(os.path.join(ROOT, config)) as f:
                dense = json.load(f).get("model", {}).get("family") == "densenet"
            if dense and a.layers:
                doc["layer_sweep"] = layer_sweep(a.bin, config, a.device, [int(x) for x in a.layers.split(",")])
                doc["layer_sweep_batch"] = SWEEP_BATCH
            with open(os.path.join(out_dir, "memory_%s.json" % stem), "w") as f:
                json.dump(doc, f, indent=1)
                f.write("\n")
            md = ["# memory: %s on %s" % (stem, slug), "",
                  "| mode | batch | planned peak | measured peak | arena (planned) | arena without reuse | parameters, "
                  "gradients, AdamW |", "|---|---|---|---|---|---|---|"]
            for r in rows:
                md.append("| %s | %d | %.1f MiB | %s | %.1f MiB | %.1f MiB | %.1f MiB |" % (
                    r["mode"], r["batch"], r["planned_peak_mib"],
                    "%.1f MiB" % r["measured_peak_mib"] if r["measured_peak_mib"] is not None else "-",
                    r["arena_mib"], r["arena_without_reuse_mib"], r["params_state_mib"]))
            md += ["", "Planned: `voxscale detect`; measured: the backend's peak allocation in one training step "
                       "(metrics.jsonl's peak_mib). Modes: fused = train.fuse=1 (default), unfused = train.fuse=0, "
                       "checkpointed = --checkpoint-activations. Device: %s. Commit %s." % (doc["device_detail"],
                                                                                         doc["commit"])]
            if "layer_sweep" in doc:
                sw = doc["layer_sweep"]
                md += ["", "Activation memory per dense layer: the arena with one dense block of L layers "
                           "(model.block_config [L]) at batch %d, planned." % SWEEP_BATCH, "",
                       "| layers | stored (MONAI's scheme) | checkpointed (memory-efficient) |", "|---|---|---|"]
                mib = lambda v: "%.1f MiB" % v if v is not None else "does not fit"
                md += ["| %d | %s | %s |" % (r["layers"], mib(r["stored_arena_mib"]), mib(r["checkpointed_arena_mib"]))
                       for r in sw]
                if len(sw) > 1 and None not in (sw[-1]["stored_arena_mib"], sw[-2]["stored_arena_mib"]):
                    per = [(sw[-1][k] - sw[-2][k]) / (sw[-1]["layers"] - sw[-2]["layers"])
                           for k in ("stored_arena_mib", "checkpointed_arena_mib")]
                    md += ["", "Each layer from %d to %d adds %.1f MiB stored, %.1f MiB checkpointed." % (
                        sw[-2]["layers"], sw[-1]["layers"], per[0], per[1])]
            with open(os.path.join(out_dir, "memory_%s.md" % stem), "w") as f:
                f.write("\n".join(md) + "\n")
            print("memory: %s" % os.path.join(out_dir, "memory_%s.json" % stem))
            print("\n".join(md))


if __name__ == "__main__":
    main()
