"""CheXpert's labels (issue 39): a manifest of JPEG films with CheXpert's 14 columns (data.label_columns chexpert)
holding 1, 0, -1 (uncertain) and empty (not mentioned) cells, trained under each uncertainty policy (data.uncertain
u_ignore / u_zeros / u_ones, per label with a default) and blank policy (data.blank zero / ignore) with
model.pos_weight_auto. Checked against numpy and sklearn from predict's probabilities at the validated checkpoint:
the pos_weight the trainer logs (the training split's negatives / positives), the validation loss (a masked BCE with
that pos_weight, mean over every cell), each label's AUROC (sklearn on the unmasked rows) and the mean over
CheXpert's five competition labels; and each bad cell or setting as one line, exit 2."""
import csv
import re

import numpy as np
import pytest

from conftest import metrics, run
from test_image2d import film, needs_djpeg, write_pnm

sklearn_metrics = pytest.importorskip("sklearn.metrics", reason="python3-sklearn is not installed; ci/deps.sh does")

CHEXPERT = ["No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
            "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other",
            "Fracture", "Support Devices"]
FIVE = ["Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Pleural Effusion"]
N_TRAIN, N_VAL = 16, 12


def write_manifest(folder, seed=0):
    """JPEG films and a CheXpert-style CSV: each cell 1, 0, -1 or empty (both values of every label in both splits,
    in the known cells); Edema is the film's finding (a bright blob)."""
    import subprocess
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(N_TRAIN + N_VAL):
        split = "train" if i < N_TRAIN else "val"
        j = i if i < N_TRAIN else i - N_TRAIN
        cells = {}
        for k, name in enumerate(CHEXPERT):
            # a fixed pattern with every value in both splits: 1 and 0 on alternate rows, some -1 and blanks
            v = ["1", "0", "1", "0", "-1", ""][(j + k) % 6] if rng.random() < 0.8 else ["1.0", "0.0", "-1.0"][j % 3]
            cells[name] = v
        positive = cells["Edema"] in ("1", "1.0")
        img = film(72, 60, seed=100 + i, blob=(0.4, 0.35, 0.13) if positive else None)
        src = folder / ("p%02d.pgm" % i)
        write_pnm(src, img)
        with open(folder / ("p%02d.jpg" % i), "wb") as f:
            subprocess.run(["cjpeg", str(src)], stdout=f, check=True)
        src.unlink()
        rows.append({"Path": "p%02d.jpg" % i, "split": split, **cells})
    for name, split_rows in (("all.csv", rows), ("val.csv", rows[N_TRAIN:])):
        with open(folder / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["Path", "split"] + CHEXPERT)
            w.writeheader()
            w.writerows(split_rows)
    return rows


def policy_values(rows, uncertain, blank):
    """[n][14] as the policies make them: 1, 0, or NaN for a masked cell."""
    per = {}
    rest = None
    for item in uncertain.split(","):
        if "=" in item:
            k, v = item.split("=")
            per[k] = v
        else:
            rest = item
    out = np.zeros((len(rows), 14))
    for i, r in enumerate(rows):
        for k, name in enumerate(CHEXPERT):
            cell = r[name]
            if cell == "":
                out[i, k] = 0.0 if blank == "zero" else np.nan
            elif float(cell) == -1:
                pol = per.get(name, rest)
                out[i, k] = {"u_zeros": 0.0, "u_ones": 1.0, "u_ignore": np.nan}[pol]
            else:
                out[i, k] = float(cell)
    return out


RUN = ["--config", "configs/test/resnet-tiny.json", "--set", "model.spatial_dims=2", "--set",
       "model.input_size=[1, 32, 32]", "--set", "model.task=multilabel", "--set", "model.num_classes=14",
       "--set", "data.source=csv", "--set", "data.path_column=Path", "--set", "data.label_columns=chexpert",
       "--set", "data.resize=fit", "--set", "data.augment=0", "--set", "output.tensorboard=0",
       "--set", "train.val_every=4", "--set", "train.val_samples=%d" % N_VAL, "--steps", "4"]


@needs_djpeg
@pytest.mark.parametrize("uncertain, blank", [("u_ignore", "zero"), ("u_zeros", "ignore"), ("u_ones", "zero"),
                                              ("Edema=u_ones,Atelectasis=u_zeros,u_ignore", "ignore")])
def test_policies_loss_pos_weight_and_auroc_against_numpy_and_sklearn(tmp_path, uncertain, blank):
    rows = write_manifest(tmp_path / "films")
    out = tmp_path / "run"
    p = run("train", *RUN, "--set", "data.csv=%s" % (tmp_path / "films" / "all.csv"), "--set",
            "data.uncertain=%s" % uncertain, "--set", "data.blank=%s" % blank, "--set", "model.pos_weight_auto=1",
            "--out", out, timeout=300)
    y = policy_values(rows, uncertain, blank)
    ytr, yva = y[:N_TRAIN], y[N_TRAIN:]
    pos, neg = np.nansum(ytr == 1, axis=0), np.nansum(ytr == 0, axis=0)
    pw = neg / pos
    logged = re.search(r"labels: pos_weight from the training split \(negatives / positives per label\):(.*)",
                       p.stdout)
    assert logged, p.stdout
    assert np.allclose([float(v) for v in logged.group(1).split()], pw, rtol=1e-3)

    pred = tmp_path / "pred"
    run("predict", "--ckpt", out / "checkpoints" / "step_4.ckpt", "--data", tmp_path / "films" / "val.csv",
        "--out", pred, "--device", "cpu", timeout=300)
    with open(pred / "predictions.csv") as f:
        got = list(csv.DictReader(f))
    probs = np.array([[float(r["prob_%d" % k]) for k in range(14)] for r in got], dtype=np.float64)
    assert probs.shape == (N_VAL, 14) and [r["path"].split("/")[-1] for r in got] == \
        ["p%02d.jpg" % i for i in range(N_TRAIN, N_TRAIN + N_VAL)]

    val = [m for m in metrics(out) if "val_loss" in m][-1]
    z = np.log(probs) - np.log1p(-probs)
    known = ~np.isnan(yva)
    t = np.nan_to_num(yva)
    bce = pw * t * np.logaddexp(0, -z) + (1 - t) * np.logaddexp(0, z)
    want = (bce * known).sum() / bce.size  # masked cells: no term, still in the mean
    assert abs(val["val_loss"] - want) <= 1e-4 * want, (val["val_loss"], want)

    aurocs = {}
    for k in range(14):
        keep = known[:, k]
        labels = yva[keep, k]
        if labels.min() == labels.max():
            assert "val_auroc_label_%d" % k not in val
            continue
        aurocs[CHEXPERT[k]] = sklearn_metrics.roc_auc_score(labels, probs[keep, k])
        assert abs(val["val_auroc_label_%d" % k] - aurocs[CHEXPERT[k]]) <= 1e-6, k
    if all(n in aurocs for n in FIVE):
        assert abs(val["val_auroc_chexpert5"] - np.mean([aurocs[n] for n in FIVE])) <= 1e-6
    else:
        assert "val_auroc_chexpert5" not in val
    assert any(np.isnan(yva).ravel()) == (blank == "ignore" or "u_ignore" in uncertain)


@needs_djpeg
@pytest.mark.parametrize("sets, words", [
    (["data.blank=zero"], "is -1 (uncertain): choose data.uncertain u_ignore, u_zeros or u_ones"),
    (["data.uncertain=u_ones"], "is empty: set data.blank zero (not mentioned = negative) or ignore (masked)"),
    (["data.uncertain=u_maybe", "data.blank=zero"], '"u_maybe" is not a policy; use u_ignore, u_zeros, u_ones'),
    (["data.uncertain=Edemaa=u_ones,u_zeros", "data.blank=zero"], 'names "Edemaa", which is not one of'),
    (["data.uncertain=u_ones,u_zeros", "data.blank=zero"], "gives two policies for the other labels"),
    (["data.uncertain=u_zeros", "data.blank=zero", "model.task=classification", "model.pos_weight_auto=1"],
     "model.pos_weight_auto weighs a multilabel head's positives"),
])
def test_bad_cells_and_settings_are_one_line(tmp_path, sets, words):
    write_manifest(tmp_path / "films")
    args = [a for s in sets for a in ("--set", s)]
    out = tmp_path / "run"
    p = run("train", *RUN, "--set", "data.csv=%s" % (tmp_path / "films" / "all.csv"), *args, "--out", out,
            check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and words in lines[0], p.stderr
    assert not out.exists()


@needs_djpeg
def test_pos_weight_auto_refuses_a_label_without_positives(tmp_path):
    rows = write_manifest(tmp_path / "films")
    for r in rows[:N_TRAIN]:
        r["Fracture"] = "0"
    with open(tmp_path / "films" / "all.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["Path", "split"] + CHEXPERT)
        w.writeheader()
        w.writerows(rows)
    p = run("train", *RUN, "--set", "data.csv=%s" % (tmp_path / "films" / "all.csv"), "--set",
            "data.uncertain=u_zeros", "--set", "data.blank=zero", "--set", "model.pos_weight_auto=1", "--out",
            tmp_path / "run", check=False)
    assert p.returncode == 2
    assert "label 12 has no positive among the 16 known training labels" in p.stderr, p.stderr
