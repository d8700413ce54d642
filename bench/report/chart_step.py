"""bench/report/chart_step.py: the training step's chart, one per step_<config>.json: left, the step's time by phase:
voxscale on one rank (bench step: forward, backward, optimizer, the rest of the step), voxscale's trainer on the
ranks bench scaling measured (compute, exposed communication = the optimizer's wait for gradient buckets still in
flight, data wait; from scaling_<config>.json where it carries them) and PyTorch's step on the same machine
(pytorch_step_<config>.json, not split by phase); right, the slowest layers of its layer pass (forward + backward,
from step_<config>.md)."""
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

import style

SEGMENTS = {  # name -> colour, the same on every bar
    "forward": style.BLUE, "backward": "#17becf", "optimizer": style.GREEN, "rest of the step": style.GREY,
    "compute": "#393b79", "exposed communication": style.RED, "data wait": style.ORANGE,
    "whole step (not split by phase)": style.PURPLE,
}


def _is_conv(layer):
    """Whether a layer of bench step's table is a convolution: the model names them *conv*, except the one after
    each decoder level's interpolation, decoder.up.L.upsample (src/families/model_build.c, PyTorch's parameter
    names)."""
    return "conv" in layer or layer.endswith(".upsample")


def make(dev):
    return [_make_one(dev, config, doc) for config, doc in sorted(dev.get("step").items())]


def _bars(dev, config, st):
    bars = []  # (label, [(segment, ms)])
    total = st["step_ms_median"]
    if all(k in st for k in ("forward_ms", "backward_ms", "optimizer_ms")):
        f, b, o = st["forward_ms"], st["backward_ms"], st["optimizer_ms"]
        segs = [("forward", f), ("backward", b), ("optimizer", o), ("rest of the step", max(0.0, total - f - b - o))]
    else:
        segs = [("whole step (not split by phase)", total)]
    bars.append(("voxscale, 1 rank\nbench step, batch %s, %s threads" % (st.get("batch", "?"), st.get("threads", "?")),
                 segs, total))
    sc = dev.get("scaling").get(config)
    if sc:
        for r in sorted((r for r in sc["rows"] if r["mode"] == "weak" and r["kind"] == "measured"
                         and "comm_wait_ms" in r), key=lambda r: r["ranks"]):
            comm, wait = r["comm_wait_ms"], r.get("data_wait_ms", 0.0)
            bars.append(("voxscale trainer, %d rank%s\n(bench scaling) batch %d/rank, %d thread%s/rank" % (
                r["ranks"], "s" if r["ranks"] > 1 else "", r["batch_per_rank"], r["threads_per_rank"],
                "s" if r["threads_per_rank"] > 1 else ""),
                [("compute", max(0.0, r["step_ms"] - comm - wait)), ("exposed communication", comm),
                 ("data wait", wait)], r["step_ms"]))
    pt = dev.get("pytorch_step").get(config)
    if pt:
        bars.append(("PyTorch %s\n%s, %s, batch %s, %s threads" % (
            pt.get("framework", "").replace("pytorch ", ""), pt.get("mode", "eager"), pt.get("dtype", "fp32"),
            pt.get("batch", "?"), pt.get("threads", "?")), [("whole step (not split by phase)", pt["step_ms_median"])],
            pt["step_ms_median"]))
    return bars


def _make_one(dev, config, st):
    meta = {"config": config, "device": st.get("device", dev.name), "commit": st.get("commit", "?")}
    bars = _bars(dev, config, st)
    layers = dev.layers(config)
    if layers:
        fig, (ax_p, ax_l) = plt.subplots(1, 2, figsize=(14, 6.8), gridspec_kw={"width_ratios": [1.25, 1]})
        fig.subplots_adjust(left=0.19, right=0.97, wspace=0.55, top=0.9, bottom=0.27)
    else:  # an older run without per-layer times: the phases alone
        fig, ax_p = plt.subplots(figsize=(10, 5.2 + 0.4 * len(bars)))
        fig.subplots_adjust(left=0.25, right=0.95, top=0.88, bottom=0.3)
        ax_l = None
    style.suptitle(fig, "the training step: time by phase and by layer (%s)" % st.get("precision", "fp32"), meta)

    ys = list(range(len(bars)))[::-1]
    used = []
    top = max(t for _, _, t in bars)
    for y, (label, segs, total) in zip(ys, bars):
        left = 0.0
        for name, v in segs:
            if v <= 0:
                continue
            ax_p.barh(y, v, left=left, color=SEGMENTS[name], height=0.6, edgecolor="white", lw=0.5)
            if v > 0.09 * top:
                ax_p.text(left + v / 2, y, style.ms(v), ha="center", va="center", fontsize=7, color="white")
            left += v
            if name not in used:
                used.append(name)
        ax_p.text(max(left, total) + top * 0.01, y, style.ms(total), va="center", fontsize=8, fontweight="bold")
    ax_p.set_yticks(ys)
    ax_p.set_yticklabels([b[0] for b in bars], fontsize=7.5)
    ax_p.set_xlim(0, top * 1.18)
    ax_p.set_xlabel("time per training step (ms; median)")
    ax_p.set_ylabel("what ran")
    ax_p.set_title("time by phase")
    ax_p.legend(handles=[Patch(color=SEGMENTS[n], label=n) for n in used], loc="upper left",
                bbox_to_anchor=(0.0, -0.12), ncol=3)
    ax_p.grid(axis="y", visible=False)

    if layers:
        names = [n for n, _ in layers][::-1]
        vals = [v for _, v in layers][::-1]
        colours = [style.BLUE if _is_conv(n) else style.ORANGE for n in names]
        ax_l.barh(range(len(names)), vals, color=colours, height=0.65)
        ref = st.get("layers_step_ms") or st["step_ms_median"]
        for i, v in enumerate(vals):
            ax_l.text(v + max(vals) * 0.01, i, "%s (%.0f%%)" % (style.ms(v), 100 * v / ref), va="center", fontsize=7.5)
        ax_l.set_yticks(range(len(names)))
        ax_l.set_yticklabels(names, fontsize=7.5)
        ax_l.set_xlim(0, max(vals) * 1.3)
        ax_l.legend(handles=[Patch(color=style.BLUE, label="convolution layer (conv + bias [+ residual])"),
                             Patch(color=style.ORANGE, label="other layer (our kernels)")], loc="upper left",
                    bbox_to_anchor=(0.0, -0.12), ncol=1)
        ax_l.set_title("time by layer: the slowest %d of the layer pass (step %s)" % (len(layers), style.ms(ref)),
                       fontsize=9)
        if "conv_ms" in st:
            ax_l.text(0.98, 0.03, "all convolution layers %s\nall other layers %s" % (
                style.ms(st["conv_ms"]), style.ms(st["other_layers_ms"])), transform=ax_l.transAxes, ha="right",
                va="bottom", fontsize=8, bbox=dict(facecolor="white", edgecolor="#cccccc"))
        ax_l.set_xlabel("time in the layer, forward + backward (ms)")
        ax_l.set_ylabel("layer")
        ax_l.grid(axis="y", visible=False)
    notes = ["One rank: one fixed batch, so no data wait and no communication."]
    if not layers:
        notes.append("No per-layer times in step_%s.md (a run older than bench step's layer timing)." % config)
    if any(s[0] == "compute" for b in bars for s in b[1]):
        notes.append("Trainer rows: median step of the bench scaling runs; exposed communication is the optimizer's "
                     "wait for buckets still in flight (comm_wait_ms), data wait the wait for the loader "
                     "(data_wait_ms); on CPU ranks the ranks share the cores.")
    notes.append("Device: %s." % st.get("device_detail", st.get("cpu", "?")))
    style.footnote(fig, " ".join(notes))
    cap = "One %s step takes %s on one rank" % (config, style.ms(st["step_ms_median"]))
    pt = dev.get("pytorch_step").get(config)
    if pt:
        cap += " against PyTorch's %s (%.2fx PyTorch's speed)" % (style.ms(pt["step_ms_median"]),
                                                                 pt["step_ms_median"] / st["step_ms_median"])
    if layers:
        cap += "; its slowest layer is %s (%s)" % (layers[0][0], style.ms(layers[0][1]))
    comm_rows = [b for b in bars if any(s[0] == "exposed communication" for s in b[1])]
    if len(comm_rows) > 1:
        last = comm_rows[-1]
        cap += "; at %s ranks the trainer waits %s per step on communication" % (
            last[0].split(",")[1].split()[0], style.ms(dict(last[1])["exposed communication"]))
    return ("step_" + config, fig, cap + ".")
