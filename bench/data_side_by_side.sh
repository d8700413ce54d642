#!/usr/bin/env bash
# bench/data_side_by_side.sh [COUNT] [WORKERS]: the chest X-ray loader against PyTorch's on the same files, one after
# the other on this machine: COUNT (default 64) full-size synthetic films (bench/cxr_films.py: 3000 x 2500 JPEGs) in a
# temporary folder, `voxscale bench data` on configs/cxr-densenet121.json over them (320 x 320, data.resize fit,
# zscore), then bench/reference/cxr_loader.py with PIL and with torchvision.io.decode_jpeg (torchvision's Resize, a
# DataLoader), WORKERS (default: the cores) workers each, and libjpeg-turbo's own decode (djpeg, full size and at
# 1/8 scale, one process per file: the floor). Writes results/<device>/data_side_by_side_cxr-densenet121.md,
# data_cxr-densenet121.json (voxscale's run) and pytorch_data_cxr-densenet121.json (the baselines and the floor). Needs .venv-bench (make bench-venv) and cjpeg/djpeg (libjpeg-turbo-progs).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-64}; workers=${2:-$(nproc)}
py=${PYTHON:-.venv-bench/bin/python}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 bench/cxr_films.py "$tmp/films" --count "$count" >/dev/null
size=$(du -sb "$tmp/films" | cut -f1)
log=$("${VOXSCALE:-./build/voxscale}" bench data --config configs/cxr-densenet121.json --set data.source=csv \
      --set data.csv="$tmp/films/films.csv" --set data.normalize=zscore --set data.workers="$workers" \
      --results "${RESULTS:-results}" --overwrite 2>&1)
ours=$(sed -n 's/^bench data: wrote \(.*\)/\1/p' <<<"$log")
pil=$("$py" bench/reference/cxr_loader.py "$tmp/films/films.csv" --workers "$workers" --decoder pil)
tv=$("$py" bench/reference/cxr_loader.py "$tmp/films/films.csv" --workers "$workers" --decoder torchvision)
floor() { local t0 t1; t0=$(date +%s.%N); for f in "$tmp"/films/*.jpg; do djpeg "$@" "$f" >/dev/null; done
          t1=$(date +%s.%N); echo "($t1 - $t0) * 1000 / $count" | bc -l; }
full=$(floor); eighth=$(floor -scale 1/8 -grayscale)
/usr/bin/python3 - "$ours" "$pil" "$tv" "$full" "$eighth" "$count" "$size" "$workers" <<'PY'
import json, os, sys
ours_path, pil, tv, full, eighth, count, size, workers = sys.argv[1:]
ours, pil, tv = json.load(open(ours_path)), json.loads(pil), json.loads(tv)
md = ["# Chest X-ray loader: voxscale against PyTorch (%s)" % ours["cpu"], "",
      "%s films of 3000 x 2500 (bench/cxr_films.py, cjpeg quality 95, %.1f MB each) to 320 x 320 (fit, zscore), %s "
      "workers each, one untimed pass then %d timed; commit %s; %s." % (count, int(size) / int(count) / 1e6, workers,
                                                                      ours["epochs"], ours["commit"], ours["isa"]), "",
      "| loader | images/s | ms per image per worker | voxscale's speed-up |", "|---|---|---|---|",
      "| voxscale bench data (libjpeg-turbo at 1/8 scale, antialiased bilinear) | %.1f | %.2f | 1.00x |" % (
          ours["images_per_s"], ours["ms_per_image_per_worker"])]
for name, r in (("PIL decode + torchvision Resize, DataLoader", pil), ("torchvision.io.decode_jpeg + Resize, DataLoader", tv)):
    md.append("| %s (%s) | %.1f | %.2f | %.2fx |" % (name, r["framework"], r["images_per_s"],
                                                     r["ms_per_image_per_worker"], ours["images_per_s"] / r["images_per_s"]))
md += ["", "The floor, libjpeg-turbo's own `djpeg` per file on one core (process start included): %.1f ms at full "
       "size, %.1f ms at 1/8 scale: the entropy (Huffman) decoding of the whole file, which no scale skips, is most "
       "of an image's time." % (float(full), float(eighth))]
folder = os.path.dirname(ours_path)
open(os.path.join(folder, "data_side_by_side_cxr-densenet121.md"), "w").write("\n".join(md) + "\n")
# the baselines beside data_<config>.json, for bench/report/measured.py
json.dump({"config": ours["config"], "films": int(count), "bytes_per_film": int(size) // int(count),
           "runs": [pil, tv], "djpeg_ms_full": float(full), "djpeg_ms_eighth": float(eighth)},
          open(os.path.join(folder, "pytorch_data_cxr-densenet121.json"), "w"), indent=1)
print("\n".join(md))
PY
