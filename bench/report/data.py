"""bench/report/data.py: what one results/<device>/ folder holds, read into one Device object: the JSON of each
benchmark by kind (scaling_<config>, allreduce_<n>ranks, kernels_<config>, step_<config>, pytorch_step_<config>,
memory_<config>, and ci/gpu.sh's summary.json), the Markdown written beside them, and the per-layer table that only
bench step's Markdown carries. Nothing here draws; a chart is made only for what is found."""
import glob
import json
import os
import re

KINDS = ("scaling", "allreduce", "kernels", "step", "pytorch_step", "memory")


class Device:
    def __init__(self, path):
        self.path = os.path.abspath(path)
        self.name = os.path.basename(self.path.rstrip("/"))
        self.by_kind = {k: {} for k in KINDS}  # kind -> {key (config, or rank count): parsed JSON}
        self.markdown = {}                     # file name -> text
        self.summary = None                    # ci/gpu.sh's summary.json, on GPU machines
        for f in sorted(glob.glob(os.path.join(self.path, "*.json"))):
            base = os.path.basename(f)[:-5]
            kind, key = classify(base)
            if kind is None:
                continue
            try:
                with open(f) as fh:
                    doc = json.load(fh)
            except (OSError, ValueError) as e:
                raise SystemExit("report: %s is not readable JSON: %s" % (f, e))
            if kind == "summary":
                self.summary = doc
            else:
                self.by_kind[kind][key] = doc
        for f in sorted(glob.glob(os.path.join(self.path, "*.md"))):
            with open(f) as fh:
                self.markdown[os.path.basename(f)] = fh.read()

    def get(self, kind):
        return self.by_kind[kind]

    def is_gpu(self):
        for d in self.by_kind["step"].values():
            if d.get("backend") == "cuda":
                return True
        return not self.name.startswith("cpu-") and bool(self.summary)

    def commits(self):
        """Every commit the folder's results come from, oldest file name first (as listed)."""
        seen = []
        for kind in KINDS:
            for doc in self.by_kind[kind].values():
                c = doc.get("commit")
                if c and c not in seen:
                    seen.append(c)
        return seen

    def layers(self, config):
        """bench step's slowest layers of its layer pass [(name, ms)], from step_<config>.md ([] when absent)."""
        md = self.markdown.get("step_%s.md" % config, "")
        rows = []
        take = False
        for line in md.splitlines():
            if line.startswith("| layer | time |"):
                take = True
                continue
            if take:
                m = re.match(r"\|\s*([^|]+?)\s*\|\s*([\d.]+) ms\s*\|", line)
                if m:
                    rows.append((m.group(1), float(m.group(2))))
                elif line.strip() and not line.startswith("|---"):
                    break
        return rows


def classify(base):
    """(kind, key) of a results file's name without .json, or (None, None) for files no chart reads (baselines)."""
    if base == "summary":
        return "summary", None
    m = re.match(r"allreduce_(\d+)ranks$", base)
    if m:
        return "allreduce", int(m.group(1))
    for kind in ("pytorch_step", "scaling", "kernels", "step", "memory"):  # pytorch_step before step
        if base.startswith(kind + "_"):
            return kind, base[len(kind) + 1:]
    return None, None


def devices(results):
    """The device folders of a results directory: those holding at least one JSON a chart or page reads."""
    out = []
    for d in sorted(glob.glob(os.path.join(results, "*/"))):
        if any(classify(os.path.basename(f)[:-5])[0] for f in glob.glob(os.path.join(d, "*.json"))):
            out.append(d.rstrip("/"))
    return out
