"""Hostile input that went through silently or ended wrong (issue 34, "Trust round"): each case is caught where it
enters, with one line naming it.

- weights given to --init-from or predict --weights holding finite 3e38 values, or a negative BatchNorm running
  variance: accepted by the reader, then NaN (predict wrote NaN probabilities for every volume with exit 0; a run
  "diverged", exit 4): now exit 2 naming the file and the tensor, before anything is written;
- a volume whose outputs are not finite (3e38 voxels without normalisation): predict wrote NaN with exit 0; now exit
  4 naming the volume, nothing written;
- a regression label or a survival time beyond float32 (1e39): accepted, then inf (regression "diverged", exit 4);
  now exit 2 naming file:row;
- a survival training set that is all censored: a loss-0, gradient-0 run that trained nothing to exit 0; now exit 2;
  an all-censored or single-class validation set: one warning (its figure is not logged).
"""
import os
import re

import numpy as np
import pytest

from conftest import run
from test_val_metrics import write_volumes

RESNET = "configs/test/resnet-tiny.json"
QUIET = ["--set", "output.tensorboard=0", "--threads", "1", "--device", "cpu"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A resnet3d run of one step and its export: (safetensors path, volume folder, checkpoint)."""
    pytest.importorskip("safetensors")
    d = tmp_path_factory.mktemp("exported")
    run("train", "--config", RESNET, "--out", d / "run", "--steps", 1, *QUIET, "--set", "train.val_samples=0")
    ck = d / "run" / "checkpoints" / "step_1.ckpt"
    run("export", "--ckpt", ck, "--out", d / "w.safetensors")
    _, val = write_volumes(d / "vols", [{"label": i % 3} for i in range(4)], lambda i: "val")
    return d / "w.safetensors", val, ck


def edited(src, dst, key, value, index=None):
    """src with tensor key set to value (at one flat index, or everywhere), its metadata (the config) kept."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
    with safe_open(str(src), "pt") as f:
        meta = f.metadata()
    w = load_file(str(src))
    if index is None:
        w[key][:] = value
    else:
        w[key].view(-1)[index] = value
    save_file(w, str(dst), metadata=meta)
    return dst


@pytest.mark.parametrize("key,value,index,said", [
    ("conv1.weight", 3e38, None, r"holds 3e\+38 at element 0, beyond the \+-1e\+12 a weight or statistic may hold"),
    ("layer1.0.bn1.running_var", -0.5, 3, r"holds -0.5 at element 3: a BatchNorm running variance is never negative"),
])
def test_weights_that_overflow_are_refused_where_they_enter(exported, tmp_path, key, value, index, said):
    weights, vols, _ = exported
    bad = edited(weights, tmp_path / "bad.safetensors", key, value, index)
    pred = tmp_path / "pred"
    p = run("predict", "--weights", bad, "--data", vols, "--out", pred, "--device", "cpu", check=False)
    assert p.returncode == 2, (p.returncode, p.stdout[-1500:], p.stderr)
    assert re.search(r"bad.safetensors: tensor \"%s\" %s" % (re.escape(key), said), p.stderr), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not pred.exists()
    out = tmp_path / "run"
    p = run("train", "--config", RESNET, "--out", out, "--steps", 2, *QUIET, "--init-from", bad, check=False)
    assert p.returncode == 2 and re.search(r"tensor \"%s\" %s" % (re.escape(key), said), p.stderr), p.stderr
    assert not out.exists()


def test_predict_refuses_to_write_outputs_that_are_not_finite(exported, tmp_path):
    _, _, ck = exported
    _, val = write_volumes(tmp_path / "huge", [{"label": i % 3} for i in range(3)], lambda i: "val", value=3e38)
    pred = tmp_path / "pred"
    p = run("predict", "--ckpt", ck, "--data", val, "--out", pred, "--device", "cpu", "--set",
            "data.normalize=none", check=False)
    assert p.returncode == 4, (p.returncode, p.stdout[-1500:], p.stderr)
    assert re.search(r"predict: \S*v00.nii: the model's output for it is not finite \((-?nan|-?inf) at element 0\)",
                     p.stderr), p.stderr
    assert [f for f in os.listdir(pred) if f != ".voxscale.lock"] == []


@pytest.mark.parametrize("task,classes,columns,row", [
    ("regression", 1, {"y": "1e39"}, 3),
    ("survival", 1, {"time": "1e39", "event": 1}, 3),
])
def test_labels_beyond_float32_are_refused_naming_the_row(tmp_path, task, classes, columns, row):
    labels = [{k: (v if i == row - 2 else (i + 1 if k != "event" else i % 2)) for k, v in columns.items()}
              for i in range(6)]
    manifest, _ = write_volumes(tmp_path / "data", labels, lambda i: "val" if i % 3 == 2 else "train")
    out = tmp_path / "run"
    p = run("train", "--config", RESNET, "--out", out, "--steps", 2, *QUIET, "--set", "model.task=%s" % task,
            "--set", "model.num_classes=%d" % classes, "--set", "data.source=csv", "--set", "data.csv=%s" % manifest,
            "--set", "data.label_columns=%s" % ",".join(columns), check=False)
    assert p.returncode == 2, (p.returncode, p.stdout[-1500:], p.stderr)
    first = list(columns)[0]
    assert re.search(r"list.csv:%d: column \"%s\" is \"1e39\", beyond float32's range" % (row, first), p.stderr), \
        p.stderr
    assert not out.exists()


def test_an_all_censored_training_set_is_refused_and_a_validation_set_without_a_figure_warned(tmp_path):
    survival = ["--set", "model.task=survival", "--set", "model.num_classes=1", "--set", "data.source=csv"]
    censored = [{"time": 10 + i, "event": 0} for i in range(6)]
    manifest, _ = write_volumes(tmp_path / "censored", censored, lambda i: "val" if i % 3 == 2 else "train")
    out = tmp_path / "run"
    p = run("train", "--config", RESNET, "--out", out, "--steps", 2, *QUIET, *survival,
            "--set", "data.csv=%s" % manifest, check=False)
    assert p.returncode == 2, (p.returncode, p.stdout[-1500:], p.stderr)
    assert "every one of the 4 training rows is censored (event 0)" in p.stderr and not out.exists()
    # events in training, none held out: trains, and says once that Harrell's C is not there
    mixed = [{"time": 10 + i, "event": 0 if i % 3 == 2 else i % 2} for i in range(6)]
    manifest, _ = write_volumes(tmp_path / "mixed", mixed, lambda i: "val" if i % 3 == 2 else "train")
    p = run("train", "--config", RESNET, "--out", tmp_path / "ok", "--steps", 2, *QUIET, *survival,
            "--set", "data.csv=%s" % manifest)
    assert p.stdout.count("every one of the 2 validation rows is censored") == 1, p.stdout
    # one class held out: AUROC undefined, said once
    one = [{"label": 1 if i % 3 == 2 else i % 3} for i in range(6)]
    manifest, _ = write_volumes(tmp_path / "one", one, lambda i: "val" if i % 3 == 2 else "train")
    p = run("train", "--config", RESNET, "--out", tmp_path / "cls", "--steps", 2, *QUIET, "--set", "data.source=csv",
            "--set", "data.csv=%s" % manifest)
    assert p.stdout.count("every one of the 2 validation rows is of class 1") == 1, p.stdout
