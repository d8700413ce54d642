"""bench/report/chart_scaling.py: `bench scaling`'s chart, one per scaling_<config>.json: speedup (left) and efficiency
(right) against 1/2/4/8 ranks on a log2 axis: the ideal line; weak and strong scaling as measured (filled) and as
projected beyond the ranks this machine runs (hollow, dashed, with the link it measured or the preset it used); the
same step projected with each interconnect preset (NVLink, PCIe, InfiniBand: same compute, another link), each with
a band from the model's own measured error; and the seeds' claimed speedups as reference marks. The values at the
largest count are written beside each panel."""
from matplotlib.lines import Line2D
import matplotlib.pyplot as plt

import style

# The speedups the seed scripts claim for 2, 4 and 8 GPUs (issue 25's figures); drawn as reference marks only.
CLAIMS = [(2, 1.85), (4, 3.6), (8, 6.5)]


def _rows(doc, mode):
    return sorted((r for r in doc["rows"] if r["mode"] == mode), key=lambda r: r["ranks"])


def _error_range(doc):
    """The model's relative errors (projection / measurement - 1) measured at 2 ranks and up: (lowest, highest),
    each widened to include 0, or None where no such count was measured."""
    errs = [r["model_error"] for r in doc["rows"] if r["ranks"] > 1 and "model_error" in r]
    return (min([0.0] + errs), max([0.0] + errs)) if errs else None


def _own_link(doc):
    text = doc.get("interconnect_beyond", "")
    if text.startswith("measured"):
        return "this machine's fitted link"
    if text.startswith("preset "):
        return style.LINK_LABEL.get(text.split()[1].rstrip(":"), text.split()[1].rstrip(":"))
    return "the run's link"


def make(dev):
    return [_make_one(dev, config, doc) for config, doc in sorted(dev.get("scaling").items())]


def _make_one(dev, config, doc):
    meta = {"config": config, "device": doc.get("device", dev.name), "commit": doc.get("commit", "?")}
    modes = [m for m in ("weak", "strong") if _rows(doc, m)]
    counts = sorted({r["ranks"] for r in doc["rows"]})
    top = max(counts)
    band = _error_range(doc)
    presets = doc.get("interconnects", [])
    fig, (ax_s, ax_e) = plt.subplots(1, 2, figsize=(14, 7.2))
    fig.subplots_adjust(left=0.06, right=0.83, wspace=0.72, top=0.9, bottom=0.36)
    style.suptitle(fig, "bench scaling: speedup and efficiency", meta)
    ends_s, ends_e, all_s = [], [], []

    ax_s.plot(counts, counts, color="black", ls="--", lw=1, label="ideal: speedup = ranks, efficiency 100%")
    ax_e.plot(counts, [100] * len(counts), color="black", ls="--", lw=1)
    all_s += counts
    for mode in modes:
        rows = _rows(doc, mode)
        colour = style.MODE_COLOR[mode]
        one = next((r for r in rows if r["ranks"] == 1), None)
        if one is None:
            continue
        meas = [r for r in rows if r["kind"] == "measured"]
        proj = [r for r in rows if r["kind"] == "projected"]
        xs = [r["ranks"] for r in meas]
        sp = [r["samples_per_s"] / one["samples_per_s"] for r in meas]
        ax_s.plot(xs, sp, "-o", color=colour, ms=6, lw=1.8, label="%s scaling, measured (batch %s)" % (
            mode, "%d per rank" % one["batch_per_rank"] if mode == "weak" else "%d in all" % one["global_batch"]))
        ax_e.plot(xs, [100 * s / n for s, n in zip(sp, xs)], "-o", color=colour, ms=6, lw=1.8)
        all_s += sp
        for x, s in zip(xs[1:], sp[1:]):  # 1 rank is 1.00x by definition
            ax_s.annotate("%.2fx" % s, (x, s), textcoords="offset points", xytext=(6, -11 if mode == "strong" else 5),
                          fontsize=7.5, color=colour)
            ax_e.annotate("%.0f%%" % (100 * s / x), (x, 100 * s / x), textcoords="offset points",
                          xytext=(6, -11 if mode == "strong" else 5), fontsize=7.5, color=colour)
        if proj:
            chain = meas[-1:] + proj  # the dashed line starts at the last measured point, hollow marks only beyond
            px = [r["ranks"] for r in chain]
            ps = [r["samples_per_s"] / one["samples_per_s"] for r in chain]
            k = len(chain) - len(proj)
            ax_s.plot(px, ps, "--", color=colour, lw=1.2)
            ax_s.plot(px[k:], ps[k:], "o", color=colour, mfc="white", ms=6,
                      label="%s, projected beyond the measured ranks (%s)" % (mode, _own_link(doc)))
            ax_e.plot(px, [100 * s / n for s, n in zip(ps, px)], "--", color=colour, lw=1.2)
            ax_e.plot(px[k:], [100 * s / n for s, n in zip(ps[k:], px[k:])], "o", color=colour, mfc="white", ms=6)
            all_s += ps
            ends_s.append((ps[-1], "%s, projected: %.2fx" % (mode, ps[-1]), colour))
            ends_e.append((100 * ps[-1] / px[-1], "%s, projected: %.0f%%" % (mode, 100 * ps[-1] / px[-1]), colour))
        elif meas:
            ends_s.append((sp[-1], "%s, measured: %.2fx" % (mode, sp[-1]), colour))
            ends_e.append((100 * sp[-1] / xs[-1], "%s, measured: %.0f%%" % (mode, 100 * sp[-1] / xs[-1]), colour))
        for ic in presets:
            name = ic["name"]
            if not all(name in r.get("interconnects", {}) for r in rows):
                continue
            v = [r["interconnects"][name]["samples_per_s"] for r in rows]
            base = v[0] if rows[0]["ranks"] == 1 else one["samples_per_s"]
            x = [r["ranks"] for r in rows]
            s = [val / base for val in v]
            c = style.LINK_COLOR.get(name, style.GREY)
            ls = "-" if mode == "weak" else ":"
            label = "%s, projected over %s (%.0f GB/s busbw)" % (mode, style.LINK_LABEL.get(name, name), ic["bus_gbps"])
            ax_s.plot(x, s, ls=ls, color=c, lw=1.4, marker="." if mode == "weak" else "", label=label)
            ax_e.plot(x, [100 * a / n for a, n in zip(s, x)], ls=ls, color=c, lw=1.4, marker="." if mode == "weak" else "")
            all_s += s
            if band:
                lo, hi = band
                bx = [n for n in x if n > 1]
                lower = [a / (1 + hi) for a, n in zip(s, x) if n > 1]
                upper = [a / (1 + lo) for a, n in zip(s, x) if n > 1]
                ax_s.fill_between(bx, lower, upper, color=c, alpha=0.12, lw=0)
                ax_e.fill_between(bx, [100 * a / n for a, n in zip(lower, bx)], [100 * a / n for a, n in zip(upper, bx)],
                                  color=c, alpha=0.12, lw=0)
                all_s += lower + upper
            ends_s.append((s[-1], "%s, %s: %.2fx" % (mode, style.LINK_LABEL.get(name, name), s[-1]), c))
            ends_e.append((100 * s[-1] / x[-1], "%s, %s: %.0f%%" % (mode, style.LINK_LABEL.get(name, name),
                                                                     100 * s[-1] / x[-1]), c))

    claims = [(n, s) for n, s in CLAIMS if n <= top]
    if claims:
        ax_s.scatter([n for n, _ in claims], [s for _, s in claims], marker="x", s=70, color=style.RED, zorder=6,
                     label="seeds' claims: " + " / ".join("%gx at %d" % (s, n) for n, s in claims))
        ax_e.scatter([n for n, _ in claims], [100 * s / n for n, s in claims], marker="x", s=70, color=style.RED, zorder=6)
        for n, s in claims:
            ax_s.annotate("claim %gx" % s, (n, s), textcoords="offset points", xytext=(-8, 7), ha="right", fontsize=7.5,
                          color=style.RED)
        all_s += [s for _, s in claims]
    all_e = [100] + [v for line in ax_e.get_lines() for v in line.get_ydata()]

    lo_y = min(0.5, min(v for v in all_s if v > 0) * 0.8)
    hi_y = max(all_s) * 1.3
    ticks = [t for t in (0.125, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64) if lo_y <= t <= hi_y]
    for ax in (ax_s, ax_e):
        style.log2_axis(ax.xaxis, counts, lambda v: "%d" % v)
        ax.set_xlim(counts[0] / 1.25, top * 1.25)
        ax.set_xlabel("ranks (processes; one per GPU)")
    style.log2_axis(ax_s.yaxis, ticks, lambda v: "%gx" % v)
    ax_s.set_ylim(lo_y, hi_y)
    ax_s.set_ylabel("speedup over 1 rank (samples/s ratio, x)")
    ax_s.set_title("speedup")
    ax_e.set_ylim(0, max(110, max(all_e) * 1.1))
    ax_e.set_ylabel("efficiency = speedup / ranks (%)")
    ax_e.set_title("efficiency")
    style.end_labels(ax_s, ends_s, log=True)
    style.end_labels(ax_e, ends_e, log=False)

    handles, labels = ax_s.get_legend_handles_labels()
    if band and presets:
        handles.append(Line2D([], [], color=style.GREY, lw=8, alpha=0.25))
        labels.append("band: projection / (1 + e), e the model's error measured here at 2+ ranks (%+.0f%% to %+.0f%%)"
                      % (100 * band[0], 100 * band[1]))
    fig.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.01, 0.06), ncol=2, frameon=True)
    notes = ["Measured: the trainer under %s on %s cores, median step after warm-up" % (
        doc.get("launcher", "?"), doc.get("cores", "?"))]
    load = doc.get("load_average_before_after")
    if load and min(load) >= 0:  # what else ran on the machine meanwhile
        notes[0] += "; load average %.2f before, %.2f after" % tuple(load)
    notes[0] += "."
    if presets:
        notes.append("Projected: docs/architecture.md 'Scaling projections' from one rank's measured timeline; each "
                     "preset keeps this machine's compute and swaps the link (sources in scaling_%s.md), its speedup "
                     "taken against the model's own 1-rank step." % config)
    if not band:
        notes.append("No rank count above 1 was measured: no error band.")
    notes.append("Beyond the measured ranks: %s." % doc.get("interconnect_beyond", "?"))
    style.footnote(fig, " ".join(notes))
    return ("scaling_" + config, fig, _caption(doc, modes, presets, top))


def _caption(doc, modes, presets, top):
    parts = []
    for mode in modes:
        rows = _rows(doc, mode)
        meas = [r for r in rows if r["kind"] == "measured" and r["ranks"] > 1]
        if meas:
            r = meas[-1]
            parts.append("%s scaling measured %.2fx at %d ranks (%.0f%% efficiency)" % (
                mode, r["speedup"], r["ranks"], 100 * r["efficiency"]))
    text = "; ".join(parts) if parts else "no rank count above 1 measured"
    nv = [ic for ic in presets if ic["name"] == "h100-nvlink"]
    weak = _rows(doc, "weak")
    if nv and weak and all("interconnects" in r for r in weak) and weak[0]["ranks"] == 1:
        v = [r["interconnects"]["h100-nvlink"]["samples_per_s"] for r in weak]
        text += ("; this step projected over NVLink reaches %.2fx at %d ranks, against the seeds' claimed %gx"
                 % (v[-1] / v[0], weak[-1]["ranks"], dict(CLAIMS).get(weak[-1]["ranks"], float("nan"))))
    return text[0].upper() + text[1:] + "."
