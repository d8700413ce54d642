"""bench/report/style.py: what every chart shares: matplotlib set up for files (Agg; SVG text kept as text so titles,
labels and legends stay searchable and selectable; fixed hash salt and no date, so the same JSON renders to the same
bytes), the title line naming chart, config, device and commit, colours, number formats, and save() writing each
chart as PNG (README, TensorBoard) and SVG (the HTML page)."""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

plt.rcParams.update({
    "svg.fonttype": "none",        # text stays <text>, not glyph paths: the test reads titles and legends from the SVG
    "svg.hashsalt": "voxscale",    # ids of clip paths and markers from a fixed salt, not a random one
    "font.family": "DejaVu Sans",  # shipped with matplotlib: the same metrics everywhere
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.grid": True,
    "grid.alpha": 0.3,
    "figure.dpi": 100,
    "savefig.dpi": 110,
    "legend.fontsize": 8,
    "legend.framealpha": 0.9,
})

# one colour per meaning, used the same way on every chart
BLUE, ORANGE, GREEN, RED, PURPLE, BROWN, GREY, PINK = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                                       "#8c564b", "#7f7f7f", "#e377c2")
MODE_COLOR = {"weak": BLUE, "strong": ORANGE}
LINK_COLOR = {"h100-nvlink": GREEN, "pcie4": PURPLE, "ib400": BROWN}
LINK_LABEL = {"h100-nvlink": "NVLink (8x H100)", "pcie4": "PCIe 4.0 x16", "ib400": "InfiniBand NDR 400"}


def title(what, meta):
    """'<what>: <config> on <device> @ <commit>', the config left out where a chart spans configs."""
    cfg = meta.get("config")
    return "%s: %s%s @ %s" % (what, (cfg + " on ") if cfg else "", meta.get("device", "?"), meta.get("commit", "?"))


def suptitle(fig, what, meta):
    fig.suptitle(title(what, meta), fontsize=11, fontweight="bold")


def footnote(fig, text, y=0.005):
    """Small print along the bottom of the figure: where the numbers come from."""
    fig.text(0.01, y, text, fontsize=7, color="#444444", ha="left", va="bottom", wrap=True)


def bytes_label(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k:
            v = b / k
            return ("%d %s" % (v, unit)) if v == int(v) else ("%.1f %s" % (v, unit))
    return "%d B" % b


def log2_axis(axis, ticks, fmt):
    """A base-2 log axis with a labelled tick at each of `ticks` and none between them."""
    scale = axis.axes.set_xscale if axis is axis.axes.xaxis else axis.axes.set_yscale
    scale("log", base=2)
    axis.set_ticks(ticks)
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    axis.set_minor_formatter(NullFormatter())


def ms(v):
    return ("%.0f ms" % v) if v >= 100 else ("%.1f ms" % v) if v >= 1 else ("%.2f ms" % v)


def save(fig, out_dir, name):
    """Writes out_dir/name.png and out_dir/name.svg; returns their paths. Neither carries a date."""
    os.makedirs(out_dir, exist_ok=True)
    png, svg = os.path.join(out_dir, name + ".png"), os.path.join(out_dir, name + ".svg")
    fig.savefig(png, format="png", metadata={"Software": None}, facecolor="white")
    fig.savefig(svg, format="svg", metadata={"Date": None, "Creator": None}, facecolor="white")
    plt.close(fig)
    return png, svg


def end_labels(ax, items, log=True, gap=0.045):
    """Writes each (y, text, colour) of `items` just right of the axes, at y's height, spread apart so that no two
    overlap (at least `gap` of the axes' height between neighbours): the values the lines end on, readable."""
    import math
    lo, hi = ax.get_ylim()
    def frac(v):
        if log:
            return (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return (v - lo) / (hi - lo)
    placed = sorted(((frac(y), t, c) for y, t, c in items if y and y > 0), key=lambda p: p[0])
    ys = [p[0] for p in placed]
    for i in range(1, len(ys)):  # push up from the bottom, then back down from the top if past it
        ys[i] = max(ys[i], ys[i - 1] + gap)
    if ys and ys[-1] > 1.0:
        ys[-1] = 1.0
        for i in range(len(ys) - 2, -1, -1):
            ys[i] = min(ys[i], ys[i + 1] - gap)
    for (f, text, colour), y in zip(placed, ys):
        ax.annotate(text, xy=(1.0, f), xycoords="axes fraction", xytext=(1.02, y), textcoords="axes fraction",
                    fontsize=7.5, color=colour, va="center", ha="left", annotation_clip=False,
                    arrowprops=dict(arrowstyle="-", color=colour, lw=0.5, alpha=0.6))
