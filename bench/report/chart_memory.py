"""bench/report/chart_memory.py: the memory chart, one for all memory_<config>.json of a device (bench/memory.py writes
them): per config (one panel each) and mode (fused, unfused, activation checkpointing), the peak the planner
promised (`voxscale detect`), the peak the backend measured in a training step, and what the same buffers would take
without the arena's reuse."""
import matplotlib.pyplot as plt
from matplotlib.patches import Patch
import numpy as np

import style

BARS = [("without_reuse_mib", "the same buffers without reuse (arena + parameters and state)", "#c7c7c7"),
        ("planned_peak_mib", "planned peak (voxscale detect)", style.BLUE),
        ("measured_peak_mib", "measured peak (backend allocations, 1 training step)", style.ORANGE)]


def make(dev):
    docs = dev.get("memory")
    if not docs:
        return []
    configs = sorted(docs)
    first = docs[configs[0]]
    meta = {"device": first.get("device", dev.name), "commit": first.get("commit", "?")}
    fig, axes = plt.subplots(1, len(configs), figsize=(max(11, 5.5 * len(configs)), 6), squeeze=False)
    axes = axes[0]
    fig.subplots_adjust(left=0.08, right=0.98, wspace=0.3, top=0.86, bottom=0.26)
    style.suptitle(fig, "memory: planned against measured peak, per config and mode", meta)
    caption = []
    for ax, config in zip(axes, configs):
        doc = docs[config]
        rows = doc["rows"]
        x = np.arange(len(rows))
        w = 0.26
        top = max(r.get(k) or 0 for r in rows for k, _, _ in BARS)
        for j, (key, _, colour) in enumerate(BARS):
            vals = [r.get(key) for r in rows]
            for xi, v in zip(x, vals):
                if v is None:
                    continue
                ax.bar(xi + (j - 1) * w, v, w * 0.95, color=colour, hatch="//" if j == 0 else None, edgecolor="white")
                ax.text(xi + (j - 1) * w, v + top * 0.01, "%.0f" % v if v >= 100 else "%.1f" % v, ha="center",
                        va="bottom", fontsize=7, rotation=90 if len(rows) > 3 else 0)
        ax.set_xticks(x)
        ax.set_xticklabels(["%s\nbatch %d" % (r["mode"], r["batch"]) for r in rows], fontsize=8)
        ax.set_ylim(0, top * 1.18)
        ax.set_ylabel("peak memory (MiB)")
        ax.set_xlabel("mode")
        ax.set_title("%s (%s)" % (config, doc.get("precision", "fp32")))
        fused = next((r for r in rows if r["mode"] == "fused"), rows[0])
        if fused.get("measured_peak_mib") is not None:
            caption.append("%s %s plans %.1f MiB and measures %.1f MiB" % (
                config, fused["mode"], fused["planned_peak_mib"], fused["measured_peak_mib"]))
    fig.legend(handles=[Patch(facecolor=c, hatch="//" if i == 0 else None, label=l)
                        for i, (_, l, c) in enumerate(BARS)], loc="lower left", bbox_to_anchor=(0.01, 0.06), ncol=2)
    style.footnote(fig, "Modes: fused = train.fuse=1 (default), unfused = train.fuse=0, checkpointed = "
                        "--checkpoint-activations. Device: %s. Measured by bench/memory.py." % first.get("device_detail", "?"))
    return [("memory", fig, "Memory: " + "; ".join(caption) + ".")]
