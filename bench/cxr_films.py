"""bench/cxr_films.py: writes N full-size synthetic chest films as JPEGs (what MIMIC-CXR stores: about 2500 x 3000,
8-bit grey, quality 95 through libjpeg-turbo's cjpeg) and a manifest with CheXpert's 14 columns, for the loader
benchmarks (`voxscale bench data`, bench/reference/cxr_loader.py; bench/data_side_by_side.sh). Deterministic in --seed.

  python3 bench/cxr_films.py DIR [--count 64] [--height 3000] [--width 2500] [--seed 0]
"""
import argparse
import os
import subprocess

import numpy as np

CHEXPERT = ["No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
            "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other",
            "Fracture", "Support Devices"]


def film(h, w, rng):
    """A chest film: trunk, lung fields, heart, diaphragm, noise and film grain (so it compresses as a film does)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    y, x = y / h, x / w
    img = 140 * (((x - 0.5) / 0.46) ** 2 + ((y - 0.55) / 0.56) ** 2 < 1)
    for cx in (0.3 + rng.uniform(-0.02, 0.02), 0.7 + rng.uniform(-0.02, 0.02)):
        img = np.where(((x - cx) / 0.17) ** 2 + ((y - 0.45) / 0.3) ** 2 < 1, 50, img)
    img = np.where(((x - 0.55) / 0.14) ** 2 + ((y - 0.62) / 0.13) ** 2 < 1, 170, img)
    img = img + 25 * np.sin(40 * y) * (img == 50)  # ribs
    return (img + rng.normal(0, 6, (h, w))).clip(0, 255).astype(np.uint8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--count", type=int, default=64)
    ap.add_argument("--height", type=int, default=3000)
    ap.add_argument("--width", type=int, default=2500)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    rows = ["Path,split," + ",".join(CHEXPERT)]
    for i in range(a.count):
        img = film(a.height, a.width, rng)
        pgm = b"P5 %d %d 255\n" % (a.width, a.height) + img.tobytes()
        jpg = subprocess.run(["cjpeg", "-quality", "95"], input=pgm, stdout=subprocess.PIPE, check=True).stdout
        with open(os.path.join(a.dir, "film%03d.jpg" % i), "wb") as f:
            f.write(jpg)
        labels = rng.choice(["1.0", "0.0", "-1.0", ""], size=len(CHEXPERT), p=[0.2, 0.5, 0.1, 0.2])
        rows.append("film%03d.jpg,%s,%s" % (i, "train", ",".join(labels)))
    with open(os.path.join(a.dir, "films.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    print("cxr_films: %d films of %d x %d in %s" % (a.count, a.height, a.width, a.dir))


if __name__ == "__main__":
    main()
