"""bench/report/chart_allreduce.py: `bench allreduce`'s chart, one for all allreduce_<n>ranks.json of a device: bus
bandwidth against message size, log-log as nccl-tests results are plotted; per rank count the in-place busbw
measured, the fitted alpha-beta ring model's busbw, T(S) = 2(n-1) a + 2(n-1)/n S/B, busbw = 2(n-1)/n S/T(S), and the
link's ceiling: for host buffers (CPU ranks over MPI, shared memory) the device's memory-copy ceiling from bench
kernels, for GPU buffers each interconnect preset bench scaling carries."""
import matplotlib.pyplot as plt
import numpy as np

import style

COLOURS = [style.BLUE, style.ORANGE, style.GREEN, style.PURPLE, style.BROWN, style.PINK]


def _model_busbw(sizes, n, alpha_us, bus_gbps):
    a, b = alpha_us * 1e-6, bus_gbps * 1e9
    t = 2 * (n - 1) * a + 2 * (n - 1) / n * sizes / b
    return 2 * (n - 1) / n * sizes / t / 1e9


def make(dev):
    docs = {n: d for n, d in dev.get("allreduce").items() if n > 1}  # one rank moves no bytes: busbw 0
    if not docs:
        return []
    first = docs[min(docs)]
    meta = {"device": first.get("device", dev.name), "commit": first.get("commit", "?")}
    comm, buffers = first.get("communicator", "?"), first.get("buffers", "?")
    fig, ax = plt.subplots(figsize=(11, 7))
    fig.subplots_adjust(left=0.08, right=0.97, top=0.9, bottom=0.3)
    style.suptitle(fig, "bench allreduce: bus bandwidth against message size (%s, %s buffers)" % (comm, buffers), meta)
    lo_b, hi_b, ys = None, None, []
    caption = []
    for i, (n, doc) in enumerate(sorted(docs.items())):
        c = COLOURS[i % len(COLOURS)]
        rows = [r for r in doc["rows"] if r.get("ip_busbw_gbps", 0) > 0]
        x = np.array([r["bytes"] for r in rows], dtype=float)
        y = np.array([r["ip_busbw_gbps"] for r in rows])
        ax.plot(x, y, "-o", color=c, ms=3.5, lw=1.5,
                label="%d ranks, measured in place (avg %.2f GB/s over %s to %s, %d wrong)" % (
                    n, doc.get("avg_bus_bandwidth_gbps", float("nan")), style.bytes_label(x[0]),
                    style.bytes_label(x[-1]), doc.get("wrong", 0)))
        k = int(np.argmax(y))
        ax.annotate("%.2f GB/s at %s" % (y[k], style.bytes_label(x[k])), (x[k], y[k]), textcoords="offset points",
                    xytext=(-10, 8), ha="right", fontsize=7.5, color=c)
        ys += list(y)
        lo_b = x[0] if lo_b is None else min(lo_b, x[0])
        hi_b = x[-1] if hi_b is None else max(hi_b, x[-1])
        fit = doc.get("fit")
        if fit and fit.get("bus_gbps", 0) > 0:
            xs = np.logspace(np.log2(x[0]), np.log2(x[-1]), 200, base=2)
            m = _model_busbw(xs, n, fit["alpha_us"], fit["bus_gbps"])
            ax.plot(xs, m, "--", color=c, lw=1.2,
                    label="%d ranks, fitted model: a = %.1f us, B = %.2f GB/s (worst error from 1 MiB: %.0f%%)" % (
                        n, fit["alpha_us"], fit["bus_gbps"], 100 * fit.get("worst_error_1mib_up", float("nan"))))
            ax.annotate("model -> B = %.2f GB/s" % fit["bus_gbps"], (xs[-1], m[-1]), textcoords="offset points",
                        xytext=(-4, -12), ha="right", fontsize=7.5, color=c)
            ys += list(m)
        caption.append("%d ranks peak at %.2f GB/s (%s)" % (n, y[k], style.bytes_label(x[k])))
    ceiling_note = ""
    if buffers == "host":
        kern = next((d for d in dev.get("kernels").values() if d.get("ceilings", {}).get("copy_gbps")), None)
        if kern:
            cg = kern["ceilings"]["copy_gbps"]
            ax.axhline(cg, color=style.RED, lw=1.5, ls="-.",
                       label="ceiling: this device's memory copy, %.1f GB/s (bench kernels: %s)" % (
                           cg, kern["ceilings"].get("copy", "copy")))
            ax.annotate("memory copy ceiling %.1f GB/s" % cg, (1, cg), xycoords=("axes fraction", "data"),
                        textcoords="offset points", xytext=(-4, 4), ha="right", fontsize=7.5, color=style.RED)
            ys.append(cg)
            ceiling_note = "; the ranks share host memory, whose copy rate (%.1f GB/s) bounds them" % cg
        else:
            ceiling_note = "; no kernels_*.json here gives the memory-copy ceiling"
    else:
        for sc in dev.get("scaling").values():
            for ic in sc.get("interconnects", []):
                ax.axhline(ic["bus_gbps"], color=style.LINK_COLOR.get(ic["name"], style.GREY), lw=1.2, ls="-.",
                           label="ceiling preset: %s, %.0f GB/s busbw" % (style.LINK_LABEL.get(ic["name"], ic["name"]),
                                                                         ic["bus_gbps"]))
                ys.append(ic["bus_gbps"])
            break
    ax.set_xscale("log", base=2)
    ticks = [t for t in (2 ** k for k in range(0, 40, 3)) if lo_b <= t <= hi_b]
    ax.set_xticks(ticks)
    ax.set_xticklabels([style.bytes_label(t) for t in ticks])
    ax.set_xlim(lo_b / 1.5, hi_b * 1.5)
    ax.set_yscale("log")
    pos = [v for v in ys if v > 0]
    ax.set_ylim(min(pos) / 2, max(pos) * 3)
    ax.set_xlabel("message size (bytes, float32 sum)")
    ax.set_ylabel("bus bandwidth, busbw = algbw x 2(n-1)/n (GB/s)")
    ax.set_title("in place, as nccl-tests' busbw column")
    fig.legend(*ax.get_legend_handles_labels(), loc="lower left", bbox_to_anchor=(0.01, 0.035), ncol=1)
    style.footnote(fig, "Out of place (a copy into the receive buffer, then in place) is in allreduce_<n>ranks.md. "
                        "Commit %s." % meta["commit"])
    return [("allreduce", fig, "All-reduce bus bandwidth: " + "; ".join(caption) + ceiling_note + ".")]
