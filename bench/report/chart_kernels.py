"""bench/report/chart_kernels.py: `bench kernels`' chart, one per kernels_<config>.json (one storage type each, named in
the legend): left, the roofline of the ops that count FLOPs (the convolutions): arithmetic intensity against achieved
FLOP/s per (op, shape), under the roofs min(GEMM ceiling, intensity x copy ceiling) measured in the same run; right,
every op's achieved fraction of its own ceiling (GEMM for compute-bound ops, copy for memory-bound ones), the
geometric mean over the op's shapes with the lowest and highest shape as whiskers."""
import math

import matplotlib.pyplot as plt
from matplotlib.patches import Patch
import numpy as np

import style

MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
COLOURS = [style.BLUE, style.GREEN, style.PURPLE, style.BROWN, style.PINK, style.ORANGE, style.GREY, style.RED]


def make(dev):
    return [_make_one(dev, config, doc) for config, doc in sorted(dev.get("kernels").items())]


def _geomean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v))


def _make_one(dev, config, doc):
    meta = {"config": config, "device": doc.get("device", dev.name), "commit": doc.get("commit", "?")}
    dtype = doc.get("precision", "f32")
    ce = doc["ceilings"]
    gemm, copy = ce["gemm_gflops"], ce["copy_gbps"]
    cases = [k for k in doc["kernels"] if str(k.get("check", "ok")).startswith("ok") and k.get("median_us")]
    fig, (ax_r, ax_b) = plt.subplots(1, 2, figsize=(14, 7.4), gridspec_kw={"width_ratios": [1.15, 1]})
    fig.subplots_adjust(left=0.06, right=0.98, wspace=0.38, top=0.9, bottom=0.3)
    style.suptitle(fig, "bench kernels: achieved against the ceilings (%s)" % dtype, meta)

    # roofline: the ops with FLOPs
    comp = [k for k in cases if k.get("flops", 0) > 0 and k.get("gflops")]
    ops = list(dict.fromkeys(k["op"] for k in comp))
    xs_all = []
    for i, op in enumerate(ops):
        ks = [k for k in comp if k["op"] == op]
        x = [k["flops"] / k["bytes"] for k in ks]
        y = [k["gflops"] for k in ks]
        xs_all += x
        ax_r.scatter(x, y, marker=MARKERS[i % len(MARKERS)], color=COLOURS[i % len(COLOURS)], s=28, alpha=0.85,
                     label="%s (%s), %d shapes" % (op, dtype, len(ks)), zorder=3)
        best = max(ks, key=lambda k: k["gflops"])
        ax_r.annotate("%.0f GFLOP/s (%.0f%%)" % (best["gflops"], 100 * best["gflops"] / gemm),
                      (best["flops"] / best["bytes"], best["gflops"]), textcoords="offset points", xytext=(5, -3 - 9 * i),
                      fontsize=7, color=COLOURS[i % len(COLOURS)])
    if not comp:
        ax_r.text(0.5, 0.5, "no op that counts FLOPs (a convolution) in this run", transform=ax_r.transAxes,
                  ha="center", va="center", color=style.GREY)
    ridge = gemm / copy
    lo = min(xs_all + [ridge]) / 3 if xs_all else ridge / 30
    hi = max(xs_all + [ridge]) * 3 if xs_all else ridge * 30
    grid = np.logspace(math.log10(lo), math.log10(hi), 200)
    ax_r.plot(grid, np.minimum(gemm, grid * copy), color="black", lw=2, zorder=2,
              label="roofs: GEMM %.1f GFLOP/s; copy %.1f GB/s x intensity" % (gemm, copy))
    ax_r.annotate("GEMM ceiling %.1f GFLOP/s" % gemm, (hi, gemm), textcoords="offset points", xytext=(-4, 4),
                  ha="right", fontsize=7.5)
    ax_r.annotate("copy ceiling %.1f GB/s" % copy, (lo * 2, lo * 2 * copy), textcoords="offset points",
                  xytext=(2, 6), fontsize=7.5, rotation=0)
    ax_r.axvline(ridge, color=style.GREY, lw=0.8, ls=":")
    ax_r.annotate("ridge %.1f FLOP/B" % ridge, (ridge, gemm / 30), textcoords="offset points", xytext=(3, 0), fontsize=7,
                  color=style.GREY)
    ax_r.set_xscale("log")
    ax_r.set_yscale("log")
    ax_r.set_xlim(lo, hi)
    ys = [k["gflops"] for k in comp] or [gemm / 10]
    ax_r.set_ylim(min(min(ys) / 3, lo * copy), gemm * 3)
    ax_r.set_xlabel("arithmetic intensity (FLOP per byte read + written)")
    ax_r.set_ylabel("achieved (GFLOP/s)")
    ax_r.set_title("roofline of the convolutions (each point one shape)")
    ax_r.legend(loc="upper left", bbox_to_anchor=(0.0, -0.11), ncol=2)

    # every op's fraction of its ceiling
    names = list(dict.fromkeys(k["op"] for k in cases))
    rows = []
    for op in names:
        f = [k["fraction_of_ceiling"] for k in cases if k["op"] == op and k.get("fraction_of_ceiling", 0) > 0]
        if f:
            rows.append((op, _geomean(f), min(f), max(f), len(f),
                         next(k["bound"] for k in cases if k["op"] == op)))
    y = np.arange(len(rows))[::-1]
    for yi, (op, g, mn, mx, n, bound) in zip(y, rows):
        c = style.BLUE if bound == "compute" else style.ORANGE
        ax_b.barh(yi, 100 * g, color=c, alpha=0.85, height=0.65)
        if n > 1:
            ax_b.errorbar(100 * g, yi, xerr=[[100 * (g - mn)], [100 * (mx - g)]], color="black", capsize=2, lw=0.8)
        ax_b.text(100 * mx + 2, yi, "%.0f%%%s" % (100 * g, " (%d shapes)" % n if n > 1 else ""), va="center",
                  fontsize=7.5)
    ax_b.set_yticks(y)
    ax_b.set_yticklabels(["%s (%s)" % (r[0], dtype) for r in rows], fontsize=7.5)
    ax_b.axvline(100, color="black", lw=1, ls="--")
    top = max([100 * r[3] for r in rows] + [100])
    ax_b.set_xlim(0, top * 1.25)
    ax_b.set_xlabel("fraction of its ceiling (%; geometric mean over shapes, whiskers lowest and highest)")
    ax_b.set_title("each op against its ceiling")
    ax_b.legend(handles=[Patch(color=style.BLUE, label="compute-bound: GFLOP/s / GEMM ceiling"),
                         Patch(color=style.ORANGE, label="memory-bound: GB/s / copy ceiling"),
                         plt.Line2D([], [], color="black", ls="--", label="the ceiling (100%)")],
                loc="upper left", bbox_to_anchor=(0.0, -0.11), ncol=2)
    style.footnote(fig, "Ceilings measured in the same run: %s; %s. Each case's median call, inputs rotated over "
                        "buffers of %s (4x the last-level cache). Device: %s. Batch %s." % (
                            ce.get("gemm", "GEMM"), ce.get("copy", "copy"),
                            style.bytes_label(4 * ce.get("cache_bytes", 0)), doc.get("device_detail", "?"),
                            doc.get("batch", "?")))
    worst = min(rows, key=lambda r: r[1]) if rows else None
    convs = [r for r in rows if r[5] == "compute"]
    cap = "Kernels of %s in %s: " % (config, dtype)
    if convs:
        cap += "the convolutions reach %.0f-%.0f%% of the %.0f GFLOP/s GEMM ceiling (geometric means per op)" % (
            100 * min(r[1] for r in convs), 100 * max(r[1] for r in convs), gemm)
    if worst:
        cap += "; the furthest from its ceiling is %s at %.0f%%" % (worst[0], 100 * worst[1])
    return ("kernels_" + config, fig, cap + ".")
