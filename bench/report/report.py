#!/usr/bin/env python3
"""bench/report/report.py: the benchmark reports a person reads: charts (matplotlib) and one HTML page per device.

  python3 bench/report/report.py [RESULTS]     every device folder under RESULTS (default: the repository's results/)
  python3 bench/report/report.py --device DIR  one device folder (what `bench scaling` runs after it has written)
                                   [--no-index]  ... without rewriting its parent's index.html (ci/gpu.sh into $OUT)

For each device folder it draws a chart for every benchmark JSON the folder holds (chart_*.py, one module per kind of
chart) into DIR/charts/<name>.png (README, TensorBoard) and .svg (the page), removes charts it no longer draws,
writes DIR/index.html (self-contained: the charts inline, the tables, the environment), then RESULTS/index.html
linking every device folder there. Rendering is deterministic: the same JSON gives the same files.
The tables of docs/measured.md (and the README's measured block) come from the same JSON by measured.py beside this
file, which needs no matplotlib; rerun it after adding results (tests/integration/test_measured.py fails otherwise).
Exit codes: 0 done; 2 bad usage; 3 no matplotlib in this Python (install python3-matplotlib; `bench scaling` then
tries the next Python); 1 anything else."""
import argparse
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import matplotlib  # noqa: F401
except ImportError:
    print("report: no matplotlib in this Python (%s): install python3-matplotlib (Debian) or matplotlib (pip)"
          % sys.executable)
    sys.exit(3)

import chart_allreduce  # noqa: E402
import chart_kernels  # noqa: E402
import chart_memory  # noqa: E402
import chart_scaling  # noqa: E402
import chart_step  # noqa: E402
import data  # noqa: E402
import page  # noqa: E402
import style  # noqa: E402

# The order the charts appear in on a page.
CHARTS = [chart_scaling, chart_allreduce, chart_kernels, chart_step, chart_memory]


class Chart:
    def __init__(self, name, caption, png, svg):
        self.name, self.caption, self.png, self.svg = name, caption, png, svg


def render_device(path):
    """Draws every chart the folder's JSON allows and writes its index.html; returns the Charts."""
    dev = data.Device(path)
    out = os.path.join(dev.path, "charts")
    charts = []
    for module in CHARTS:
        for name, fig, caption in module.make(dev):
            png, svg = style.save(fig, out, name)
            charts.append(Chart(name, caption, png, svg))
    drawn = {c.png for c in charts} | {c.svg for c in charts}
    for f in glob.glob(os.path.join(out, "*.png")) + glob.glob(os.path.join(out, "*.svg")):
        if f not in drawn:  # a chart of a benchmark no longer in the folder
            os.remove(f)
    if os.path.isdir(out) and not os.listdir(out):
        os.rmdir(out)
    page.write_device(dev, charts)
    return dev, charts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "results"),
                    help="the results directory: one folder per device (default: the repository's results/)")
    ap.add_argument("--device", metavar="DIR", help="one device folder only (its parent's index.html is rewritten)")
    ap.add_argument("--no-index", action="store_true",
                    help="with --device: leave the parent folder's index.html alone (a folder outside results/)")
    a = ap.parse_args(argv)
    if a.device:
        if not os.path.isdir(a.device):
            ap.error("--device %s: no such folder" % a.device)
        folders, results = [a.device], os.path.dirname(os.path.abspath(a.device.rstrip("/")))
    else:
        if not os.path.isdir(a.results):
            ap.error("%s: no such folder" % a.results)
        folders, results = data.devices(a.results), a.results
    for f in folders:
        dev, charts = render_device(f)
        print("report: %s: %d chart(s) in %s, page %s" % (dev.name, len(charts), os.path.join(dev.path, "charts"),
                                                          os.path.join(dev.path, "index.html")))
    if not a.no_index:
        index = page.write_index(results)
        print("report: %s links %d device folder(s)" % (index, len(data.devices(results))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
