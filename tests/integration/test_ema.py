"""train.ema_decay (issue 21): the weights' exponential moving average as the model buffer ema.flat. After every
optimizer step ema = decay * ema + (1 - decay) * weights, checked on exported checkpoints of consecutive steps; the
average is in the checkpoint (a resumed run reproduces the uninterrupted one's bytes), exported as ema.<name> in each
parameter's torch shape, loaded back by --init-from into a run that keeps one and passed over, said, by one that
does not."""
import os

import numpy as np
import pytest

from conftest import run
from test_image2d import FILMS_2D, needs_djpeg, write_films

safetensors = pytest.importorskip("safetensors.numpy")
TINY = os.path.join("configs", "test", "tiny.json")
DIFF = os.path.join("configs", "test", "vit3d-diffusion-tiny.json")
QUIET = ["--device", "cpu", "--set", "output.tensorboard=0", "--set", "train.val_every=0"]


def _export(ckpt, out):
    run("export", "--ckpt", ckpt, "--out", out)
    return safetensors.load_file(str(out))


def test_average_follows_each_step(tmp_path):
    out = tmp_path / "run"
    run("train", "--config", TINY, *QUIET, "--steps", "3", "--set", "train.ema_decay=0.5", "--set",
        "train.ckpt_every=1", "--out", out)
    a = _export(out / "checkpoints" / "step_2.ckpt", tmp_path / "a.safetensors")
    b = _export(out / "checkpoints" / "step_3.ckpt", tmp_path / "b.safetensors")
    names = [k for k in b if not k.startswith("ema.") and "running_" not in k and "num_batches" not in k]
    assert names and all("ema." + n in b and b["ema." + n].shape == b[n].shape for n in names)
    moved = 0.0
    for n in names:
        want = 0.5 * a["ema." + n].astype(np.float64) + 0.5 * b[n].astype(np.float64)
        assert np.abs(b["ema." + n] - want).max() <= 1e-6 * max(1.0, np.abs(want).max()), n
        moved = max(moved, float(np.abs(b["ema." + n] - b[n]).max()))
    assert moved > 1e-5  # the average is not the weights themselves


def test_resume_with_the_average_is_exact(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    common = ["train", "--config", DIFF, *QUIET, "--steps", "12", "--set", "train.ckpt_every=6",
              "--set", "train.ema_decay=0.9"]
    run(*common, "--out", a, timeout=300)
    run(*common, "--out", b, "--resume", a / "checkpoints" / "step_6.ckpt", timeout=300)
    assert (a / "checkpoints" / "step_12.ckpt").read_bytes() == (b / "checkpoints" / "step_12.ckpt").read_bytes()
    w = _export(a / "checkpoints" / "step_12.ckpt", tmp_path / "w.safetensors")
    assert "ema.blocks.0.attn.qkv.weight" in w


def test_init_from_reads_or_passes_over_the_average(tmp_path):
    src = tmp_path / "src"
    run("train", "--config", TINY, *QUIET, "--steps", "2", "--set", "train.ema_decay=0.5", "--out", src)
    f = tmp_path / "w.safetensors"
    w = _export(src / "checkpoints" / "step_2.ckpt", f)
    # a run that keeps an average loads it (its step 0 checkpoint would show it; the log says so)
    p = run("train", "--config", TINY, *QUIET, "--steps", "1", "--set", "train.ema_decay=0.5", "--init-from", f,
            "--out", tmp_path / "with")
    assert "the weights' average (ema.*) of" in p.stdout + p.stderr
    # one that keeps none says it passed them over, and is not refused for them
    p = run("train", "--config", TINY, *QUIET, "--steps", "1", "--init-from", f, "--out", tmp_path / "without")
    assert "ema.* keys (the weights' average) not used" in p.stdout + p.stderr
    assert sum(k.startswith("ema.") for k in w) > 0


def test_the_average_crosses_a_stage_boundary(tmp_path):
    # 16^3 -> 32^3 (configs/test/vit3d-diffusion-stages.json): the average is carried like the weights (positions
    # resampled), not reset; a reset one would be (1 - 0.9^4) of the weights after the second stage's 4 steps
    out = tmp_path / "run"
    run("train", "--config", os.path.join("configs", "test", "vit3d-diffusion-stages.json"), *QUIET,
        "--set", "train.ema_decay=0.9", "--out", out, timeout=300)
    w = _export(out / "checkpoints" / "step_10.ckpt", tmp_path / "w.safetensors")
    for n in ("pos_embed.weight", "blocks.0.attn.qkv.weight"):
        assert w["ema." + n].shape == w[n].shape
        assert np.linalg.norm(w["ema." + n] - w[n]) < 0.2 * np.linalg.norm(w[n]), n


@needs_djpeg
def test_validation_runs_the_average_as_predict_does(tmp_path):
    """train.ema_eval (default 1): the validation loss of a run with train.ema_decay is the moving average's, the
    weights predict applies (a numpy BCE of predict's probabilities at the validated checkpoint equals it), and
    ema_eval 0 validates the trained weights instead (another loss); the trained weights come back bit for bit (a
    run that validates every step ends on the same checkpoint bytes as one that never does)."""
    import csv
    import json
    films = write_films(tmp_path / "films", 16)
    common = [*FILMS_2D, "--set", "data.csv=%s" % films, "--set", "train.ema_decay=0.5", "--set",
              "train.val_every=3", "--steps", "6", "--set", "train.ckpt_every=3"]
    runs = {}
    for name, extra in (("ema", []), ("raw", ["--set", "train.ema_eval=0"]),
                        ("never", ["--set", "train.val_every=0"])):
        runs[name] = tmp_path / name
        run("train", *common, *extra, "--out", runs[name], "--device", "cpu")
    ckpt = runs["ema"] / "checkpoints" / "step_6.ckpt"
    assert ckpt.read_bytes() == (runs["never"] / "checkpoints" / "step_6.ckpt").read_bytes()
    # best.ckpt, written at a validation, holds the trained weights (and their average), not the average twice
    vals = [json.loads(l) for l in open(runs["ema"] / "metrics.jsonl") if "val_auroc" in l]
    best = max((v for v in vals if v["step"] > 0), key=lambda v: v["val_auroc"])["step"]  # (multilabel: AUROC, the
    at = _export(runs["ema"] / "checkpoints" / "best.ckpt", tmp_path / "best.safetensors")  # first of equals)
    same = _export(runs["ema"] / "checkpoints" / ("step_%d.ckpt" % best), tmp_path / "same.safetensors")
    assert all(np.array_equal(at[k], same[k]) for k in same)
    assert any(not np.array_equal(at[k], at["ema." + k]) for k in at if "ema." + k in at)
    assert ckpt.read_bytes() == (runs["raw"] / "checkpoints" / "step_6.ckpt").read_bytes()
    val = {n: [json.loads(l) for l in open(runs[n] / "metrics.jsonl") if "val_loss" in l][-1]["val_loss"]
           for n in ("ema", "raw")}
    assert abs(val["ema"] - val["raw"]) > 1e-4 * abs(val["raw"]), val
    # predict (with the average) over the validation films
    rows = list(csv.DictReader(open(films)))
    val_csv = tmp_path / "val.csv"
    with open(val_csv, "w") as f:
        f.write("path,finding\n" + "".join("%s,%s\n" % (r["path"], r["finding"]) for r in rows if r["split"] == "val"))
    for r in rows:
        os.symlink(tmp_path / "films" / r["path"], tmp_path / r["path"])
    pred = tmp_path / "pred"
    run("predict", "--ckpt", ckpt, "--data", val_csv, "--out", pred, "--device", "cpu")
    got = list(csv.DictReader(open(pred / "predictions.csv")))
    p = np.array([float(r["prob_0"]) for r in got])
    t = np.array([float(r["finding"]) for r in rows if r["split"] == "val"])
    z = np.log(p) - np.log1p(-p)
    bce = (t * np.logaddexp(0, -z) + (1 - t) * np.logaddexp(0, z)).mean()
    assert abs(val["ema"] - bce) <= 1e-4 * bce, (val, bce)

