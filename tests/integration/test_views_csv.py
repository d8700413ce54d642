"""X-ray views given beside each CT (data.view_columns, src/data/views.h): a CSV of NIfTI CTs and their two DRR PNGs
trains configs/test/vit3d-diffusion-tiny.json; when the PNGs are the DRRs voxscale would render (drr.h's formula in
numpy, 16-bit), the first step's projection loss and the validation's equal the rendered-views run's to the PNGs'
quantisation, with and without augmentation (the views are flipped and swapped with the volume); other views give
another loss (the given ones are what the model reads); bad views are one line and exit 2 before anything is
written, or left out with data.skip_bad."""
import json
import os

import numpy as np
import pytest

from conftest import metrics, run
from test_data import assert_bad, write_png

nib = pytest.importorskip("nibabel", reason="python3-nibabel is not installed; ci/deps.sh installs it")
CFG = os.path.join("configs", "test", "vit3d-diffusion-tiny.json")  # 16^3 volumes, 16^2 views, mu_scale 3
SIZE, IMG, MU = 16, 16, 3.0


def drr(vol, axis):
    """drr.h's image of vol [d][h][w] along h (axis 1: AP) or w (axis 2: lateral), at img = the volume's side (the
    bilinear resampling is then the identity): 1 - exp(-mu_scale * spacing * the ray's sum), spacing 1/along."""
    return 1.0 - np.exp(-MU * vol.astype(np.float64).sum(axis=axis) / vol.shape[axis])


def write_views_dataset(tmp_path, n=12, n_val=4):
    """n phantom-like CTs (ellipsoids of several intensities, asymmetric so flips show) as float32 NIfTI in [0, 1],
    their two DRRs as 16-bit PNGs, and list.csv (path, split, drr_ap, drr_lat); returns the CSV's path."""
    rng = np.random.default_rng(11)
    z, y, x = np.meshgrid(*[np.linspace(-1, 1, SIZE)] * 3, indexing="ij")
    (tmp_path / "ct").mkdir()
    (tmp_path / "drr").mkdir()
    rows = ["path,split,drr_ap,drr_lat"]
    for i in range(n):
        vol = np.zeros((SIZE,) * 3)
        for _ in range(3):
            c, r = rng.uniform(-0.5, 0.5, 3), rng.uniform(0.15, 0.5, 3)
            vol += rng.uniform(0.2, 0.6) * (((z - c[0]) / r[0]) ** 2 + ((y - c[1]) / r[1]) ** 2 +
                                            ((x - c[2]) / r[2]) ** 2 < 1)
        vol = np.clip(vol + rng.normal(0, 0.02, vol.shape), 0, 1).astype(np.float32)  # [d][h][w]
        nib.save(nib.Nifti1Image(vol.transpose(2, 1, 0), np.eye(4)), str(tmp_path / "ct" / ("case%d.nii.gz" % i)))
        for name, axis in (("ap", 1), ("lat", 2)):
            write_png(tmp_path / "drr" / ("case%d_%s.png" % (i, name)),
                      np.round(drr(vol, axis) * 65535).astype(np.uint16))
        rows.append("ct/case%d.nii.gz,%s,drr/case%d_ap.png,drr/case%d_lat.png" % (i, "val" if i >= n - n_val else
                                                                                 "train", i, i))
    (tmp_path / "list.csv").write_text("\n".join(rows) + "\n")
    return tmp_path / "list.csv"


def train(tmp_path, name, csv, views="drr_ap,drr_lat", check=True, steps=2, keys=None, **data):
    """Trains the tiny config on csv for `steps` steps into tmp_path/name; data.* keys as keyword arguments, any
    other key in `keys`."""
    sets = {"data.source": "csv", "data.csv": str(csv), "data.normalize": "none", "data.view_columns": views,
            "train.steps": steps, "train.log_every": 1, "train.val_every": steps, "train.val_samples": 4,
            "output.tensorboard": 0, "output.image_every": 0}
    sets.update({"data." + k: v for k, v in data.items()})
    sets.update(keys or {})
    if "train.stages" in sets:  # the stages set the run's length
        del sets["train.steps"]
    args = ["train", "--config", CFG, "--device", "cpu", "--out", tmp_path / name]
    for k, v in sets.items():
        args += ["--set", "%s=%s" % (k, v)]
    return run(*args, check=check)


def losses(run_dir):
    m = metrics(run_dir)
    step1 = next(r for r in m if r.get("step") == 1 and "projection" in r)
    val = [r for r in m if "val_projection" in r][-1]
    return step1, val


@pytest.mark.parametrize("augment", [0, 1])
def test_given_views_equal_the_rendered_ones(tmp_path, augment):
    csv = write_views_dataset(tmp_path)
    rendered = train(tmp_path, "rendered", csv, views="", augment=augment)
    given = train(tmp_path, "given", csv, augment=augment)
    assert "X-ray views given beside each CT" in given.stdout
    r1, rv = losses(tmp_path / "rendered")
    g1, gv = losses(tmp_path / "given")
    # step 1's prediction is 0 (adaLN-Zero's final Linear), so its projection loss is the MSE of x0_hat's DRRs
    # against the views alone: the PNGs differ from the renders by their 16-bit rounding (< 7.7e-6 a pixel)
    assert abs(g1["projection"] - r1["projection"]) <= 1e-4 * r1["projection"], (g1, r1)
    assert abs(g1["diffusion"] - r1["diffusion"]) <= 1e-4 * r1["diffusion"], (g1, r1)
    # validation reads the held-out CTs' own PNGs (after a step whose conditioning differed by that rounding)
    assert abs(gv["val_projection"] - rv["val_projection"]) <= 1e-3 * rv["val_projection"], (gv, rv)
    if augment:
        # other views (each CT's two swapped: the model reads the files, not renders) give another loss
        train(tmp_path, "swapped", csv, views="drr_lat,drr_ap", augment=augment)
        s1, _ = losses(tmp_path / "swapped")
        assert abs(s1["projection"] - r1["projection"]) > 1e-2 * r1["projection"], (s1, r1)


def test_bad_views_are_one_line_and_exit_2(tmp_path):
    csv = write_views_dataset(tmp_path, n=6, n_val=2)
    rows = csv.read_text().splitlines()
    write_png(tmp_path / "drr" / "wide.png", np.zeros((IMG, IMG + 4), np.uint16))
    nib.save(nib.Nifti1Image(np.zeros((SIZE, SIZE, SIZE + 2), np.float32), np.eye(4)), str(tmp_path / "ct" / "big.nii.gz"))

    good = (tmp_path / "drr" / "case5_ap.png").read_bytes()
    at = good.index(b"IDAT") + 8  # a byte of the pixel data: the header reads, the pixels do not
    (tmp_path / "drr" / "damaged.png").write_bytes(good[:at] + bytes([good[at] ^ 0xFF]) + good[at + 1:])

    def with_rows(name, new_rows):
        path = tmp_path / (name + ".csv")
        path.write_text("\n".join(new_rows) + "\n")
        return path

    head = rows[:-1]  # the last row (case5, val) replaced by a bad one: row 7
    cases = [
        ("size", head + ["ct/case5.nii.gz,val,drr/wide.png,drr/case5_lat.png"],
         ["wide.png", "row 7", "column \"drr_ap\"", "20 x 16", "xray.img_size asks 16 x 16"]),
        ("cell", head + ["ct/case5.nii.gz,val,drr/case5_ap.png,"],
         ["case5.nii.gz", "row 7", "no X-ray view in column \"drr_lat\""]),
        ("file", head + ["ct/case5.nii.gz,val,drr/case5_ap.png,drr/nope.png"],
         ["nope.png", "row 7", "column \"drr_lat\"", "no such file"]),
        ("damaged", head + ["ct/case5.nii.gz,val,drr/damaged.png,drr/case5_lat.png"],
         ["damaged.png", "row 7", "column \"drr_ap\"", "not a readable PNG"]),
        ("volume", head + ["ct/big.nii.gz,val,drr/case5_ap.png,drr/case5_lat.png"],
         ["big.nii.gz", "row 7", "18 x 16 x 16 is not the input 16 x 16 x 16"]),
    ]
    for name, new_rows, needles in cases:
        assert_bad(train(tmp_path, name, with_rows(name, new_rows), check=False), *needles)
        assert not (tmp_path / name).exists(), name
    assert_bad(train(tmp_path, "column", csv, views="drr_ap,drr_side", check=False), "no column \"drr_side\"",
               "data.view_columns")
    assert not (tmp_path / "column").exists()
    assert_bad(train(tmp_path, "one", csv, views="drr_ap", check=False), "data.view_columns", "two")
    # the views show the whole volume: a stage at another size would crop or pad it
    stages = '[{"input_size": [16, 16, 16], "steps": 1}, {"input_size": [32, 32, 32], "steps": 1}]'
    assert_bad(train(tmp_path, "stages", csv, check=False, keys={"train.stages": stages}), "train.stages[1]",
               "data.view_columns")
    assert_bad(train(tmp_path, "family", csv, check=False, keys={"model.family": "vit3d"}),
               "only model.family vit3d_diffusion")
    assert not (tmp_path / "stages").exists() and not (tmp_path / "family").exists()
    # data.skip_bad leaves such rows out with a warning, as a bad volume, and trains on the rest
    p = train(tmp_path, "skip", with_rows("skip", rows[:-2] + ["ct/case4.nii.gz,val,drr/wide.png,drr/case4_lat.png",
                                                               cases[2][1][-1]]), skip_bad=1)
    assert p.stderr.count("skipped (data.skip_bad)") == 2, p.stderr
    assert (tmp_path / "skip" / "metrics.jsonl").exists()
