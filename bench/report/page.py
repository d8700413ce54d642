"""bench/report/page.py: the HTML pages. results/<device>/index.html is self-contained (the charts' SVG inline, no
script, no stylesheet or image fetched): the environment the results were measured in, every chart with one
sentence on what it says, then the Markdown tables the benchmarks wrote. results/index.html links every device
folder, CPU and GPU alike, with what each holds."""
import html
import os
import re

import matplotlib

import data

STYLE = """body{font-family:DejaVu Sans,Arial,sans-serif;margin:1.5em auto;max-width:1400px;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:1.6em}h3{font-size:1em}
table{border-collapse:collapse;margin:.5em 0;font-size:.85em}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}
th{background:#f2f2f2}figure{margin:1em 0}figure svg{max-width:100%;height:auto;display:block}
figcaption{font-size:.95em;margin-top:.3em}code{background:#f4f4f4;padding:0 2px}.note{color:#555;font-size:.9em}"""


def _svg_inline(path):
    """The SVG's <svg> element, without the XML declaration and DOCTYPE that may not appear inside HTML."""
    with open(path) as f:
        text = f.read()
    return text[text.index("<svg"):]


def _inline_md(s):
    s = html.escape(s, quote=False)
    s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", s)


def md_to_html(md):
    """The Markdown the benchmarks write: headings, pipe tables and paragraphs (nothing else occurs in it)."""
    out, para, table = [], [], []

    def flush():
        if para:
            out.append("<p>%s</p>" % _inline_md(" ".join(para)))
            para.clear()
        if table:
            rows = [r for r in table if not re.match(r"^\|[-|: ]+\|$", r.strip())]
            cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
            body = "".join("<tr>%s</tr>" % "".join("<%s>%s</%s>" % (t, _inline_md(c), t) for c in row)
                           for t, row in [("th", cells[0])] + [("td", r) for r in cells[1:]])
            out.append("<table>%s</table>" % body)
            table.clear()

    for line in md.splitlines():
        if line.startswith("|"):
            if para:
                flush()
            table.append(line)
        elif line.startswith("#"):
            flush()
            level = min(6, len(line) - len(line.lstrip("#")) + 2)
            out.append("<h%d>%s</h%d>" % (level, _inline_md(line.lstrip("#").strip()), level))
        elif not line.strip():
            flush()
        else:
            if table:
                flush()
            para.append(line.strip())
    flush()
    return "\n".join(out)


def environment(dev):
    """(what, value, where it comes from) rows: the machine the folder's results were measured on."""
    rows = []

    def add(what, value, src):
        if value not in (None, ""):
            rows.append((what, str(value), src))

    env = (dev.summary or {}).get("environment", {})
    for key, what in (("gpu", "GPU"), ("gpus", "GPUs"), ("driver", "driver"), ("driver_cuda", "driver's CUDA"),
                      ("nvcc", "CUDA toolkit"), ("cudnn", "cuDNN"), ("cublas", "cuBLAS"), ("nccl", "NCCL"),
                      ("torch", "PyTorch"), ("host_cpu", "host CPU"), ("cores", "host cores"), ("commit", "commit")):
        add(what, env.get(key), "summary.json (ci/gpu.sh)")
    for config, st in sorted(dev.get("step").items()):
        src = "step_%s.json" % config
        add("device", st.get("device_detail"), src)
        add("CPU", st.get("cpu"), src)
        add("cores / threads", "%s / %s" % (st.get("cores", "?"), st.get("threads", "?")), src)
        add("BLAS", st.get("blas"), src)
        add("compiler", st.get("compiler"), src)
        add("backend, precision", "%s, %s" % (st.get("backend", "?"), st.get("precision", "fp32")), src)
        break
    for config, k in sorted(dev.get("kernels").items()):
        add("kernels measured on", k.get("device_detail"), "kernels_%s.json" % config)
        break
    for config, p in sorted(dev.get("pytorch_step").items()):
        add("PyTorch (reference step)", "%s, %s threads%s" % (p.get("framework"), p.get("threads"),
                                                             ", cuDNN %s" % p["cudnn"] if p.get("cudnn") else ""),
            "pytorch_step_%s.json" % config)
        break
    for config, sc in sorted(dev.get("scaling").items()):
        add("ranks launched by", "%s on %s cores" % (sc.get("launcher"), sc.get("cores")), "scaling_%s.json" % config)
        break
    for n, ar in sorted(dev.get("allreduce").items()):
        add("all-reduce", "%s communicator, %s buffers" % (ar.get("communicator"), ar.get("buffers")),
            "allreduce_%dranks.json" % n)
        break
    add("results from commits", ", ".join(dev.commits()), "the JSON files' commit fields")
    add("charts rendered with", "matplotlib %s (bench/report/report.py), from the JSON files above" %
        matplotlib.__version__, "this page")
    return rows


def write_device(dev, charts):
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>voxscale results: %s</title>" % html.escape(dev.name), "<style>%s</style></head><body>" % STYLE,
             "<h1>voxscale results: %s</h1>" % html.escape(dev.name),
             '<p class="note">Written by <code>bench/report/report.py</code> from the benchmark JSON in this folder. '
             '<a href="../index.html">Every device</a>.</p>', "<h2>Environment</h2>",
             "<table><tr><th>what</th><th>value</th><th>from</th></tr>"]
    for what, value, src in environment(dev):
        parts.append("<tr><td>%s</td><td>%s</td><td>%s</td></tr>" % (html.escape(what), html.escape(value),
                                                                   html.escape(src)))
    parts.append("</table>")
    parts.append("<h2>Charts</h2>")
    if not charts:
        parts.append("<p>No benchmark JSON here that a chart reads.</p>")
    for c in charts:
        parts.append('<figure class="chart" id="chart-%s" data-chart="%s">' % (c.name, c.name))
        parts.append(_svg_inline(c.svg))
        parts.append('<figcaption>%s <a href="charts/%s.svg">SVG</a> <a href="charts/%s.png">PNG</a></figcaption>'
                     "</figure>" % (html.escape(c.caption), c.name, c.name))
    if dev.markdown:
        parts.append("<h2>Tables</h2>")
        for name, md in sorted(dev.markdown.items()):
            parts.append('<section id="table-%s"><h3>%s</h3>%s</section>' % (
                html.escape(name[:-3]), html.escape(name), md_to_html(md)))
    parts.append("</body></html>")
    path = os.path.join(dev.path, "index.html")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")
    return path


def write_index(results):
    rows = []
    for path in data.devices(results):
        dev = data.Device(path)
        kinds = ["%s (%s)" % (k, ", ".join(str(x) for x in sorted(v))) for k, v in dev.by_kind.items() if v]
        has_page = os.path.exists(os.path.join(path, "index.html"))
        n_charts = len([f for f in os.listdir(os.path.join(path, "charts")) if f.endswith(".svg")]) \
            if os.path.isdir(os.path.join(path, "charts")) else 0
        link = ('<a href="%s/index.html">%s</a>' % (html.escape(dev.name), html.escape(dev.name))) if has_page \
            else html.escape(dev.name) + " (no page yet: run bench/report/report.py)"
        rows.append("<tr><td>%s</td><td>%s</td><td>%d</td><td>%s</td><td>%s</td></tr>" % (
            link, "GPU" if dev.is_gpu() else "CPU", n_charts, html.escape("; ".join(kinds)),
            html.escape(", ".join(dev.commits()))))
    text = "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8"><title>voxscale results</title>',
        "<style>%s</style></head><body>" % STYLE, "<h1>voxscale results</h1>",
        '<p class="note">One folder per device; each page holds its charts, tables and environment. Written by '
        "<code>bench/report/report.py</code>.</p>",
        "<table><tr><th>device</th><th>kind</th><th>charts</th><th>benchmarks (configs, rank counts)</th>"
        "<th>commits</th></tr>"] + rows + ["</table></body></html>"])
    path = os.path.join(results, "index.html")
    with open(path, "w") as f:
        f.write(text + "\n")
    return path
