"""test_best_ckpt.py (issue 35): the best checkpoints. Every family keeps checkpoints/best.ckpt by the figure
train.best_metric names (auto: ae3d's L1 too, which never had one); a staged run keeps each stage's best as
stage_<k>_best.ckpt (the same bytes as the step checkpoint of that stage's best validation) and best.ckpt is the last
stage's best, the final config's model; a stage's best of vit3d_diffusion (another layout) loads in export and predict
at its stage's size, named, and resumes; a best_metric the family does not log is one line, exit 2."""
import json

import numpy as np
import pytest

import conftest
from conftest import metrics, run

QUIET = ["--set", "output.tensorboard=0", "--threads", "1"]
RESNET_STAGES = '[{"steps": 4, "input_size": [16, 16, 16]}, {"steps": 4, "input_size": [24, 24, 24]}]'
FAMILIES = {  # config and settings, the figure auto keeps the best of, lower (min) or higher (max) better
    "ae3d": (["--config", "configs/test/stages.json"], "val_l1", min),
    "resnet3d": (["--config", "configs/test/resnet-tiny.json", "--set", "train.stages=" + RESNET_STAGES,
                  "--set", "train.val_every=2", "--set", "train.val_samples=6"], "val_accuracy", max),
    "vit3d_diffusion": (["--config", "configs/test/vit3d-diffusion-stages.json"], "val_loss", min),
}


def stage_ends(out):
    """[(first step, last step)] of each stage of the run's resolved config"""
    bounds, first = [], 0
    for st in json.loads((out / "config.json").read_text())["train"]["stages"]:
        bounds.append((first, first + st["steps"]))
        first += st["steps"]
    return bounds


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_stage_keeps_its_best_and_best_ckpt_is_the_last_stages(tmp_path, family):
    args, key, better = FAMILIES[family]
    out = tmp_path / family
    every = 4 if family == "vit3d_diffusion" else 2
    run("train", *args, *QUIET, "--out", out, "--set", "train.ckpt_every=%d" % every, timeout=300)
    vals = {m["step"]: m[key] for m in metrics(out) if key in m}
    ckpts = out / "checkpoints"
    bounds = stage_ends(out)
    assert len(bounds) >= 2
    for k, (first, last) in enumerate(bounds):
        steps = [s for s in sorted(vals) if first < s <= last]  # (a stage's first step: the state before it)
        assert steps, (k, vals)
        best = steps[0]
        for s in steps:  # the first of equal figures stays
            if better(vals[s], vals[best]) != vals[best]:
                best = s
        step_ckpt = ckpts / ("step_%d.ckpt" % best)
        if step_ckpt.exists():  # (validations between checkpoints: no step file to compare with)
            assert (ckpts / ("stage_%d_best.ckpt" % k)).read_bytes() == step_ckpt.read_bytes(), (k, best, vals)
        else:
            assert (ckpts / ("stage_%d_best.ckpt" % k)).exists()
    assert (ckpts / "best.ckpt").read_bytes() == (ckpts / ("stage_%d_best.ckpt" % (len(bounds) - 1))).read_bytes()


@conftest.needs_mpirun
def test_a_sharded_staged_run_writes_every_best_on_every_rank(tmp_path):
    """ZeRO-1 on 2 ranks: rank 0's validation asks for the last stage's two checkpoints at once, every rank writes
    its shard of both (trainer_share_pending_checkpoint)"""
    out = tmp_path / "zero"
    conftest.mpi(2, "train", "--config", "configs/test/stages.json", *QUIET, "--zero", "1", "--out", out,
                 timeout=300)
    names = {p.name for p in (out / "checkpoints").iterdir()}
    assert {"stage_0_best.zero", "stage_1_best.zero", "stage_2_best.zero", "best.zero"} <= names, names
    run("ckpt", "consolidate", out / "checkpoints" / "best.zero", "--out", tmp_path / "best.ckpt")
    run("ckpt", "consolidate", out / "checkpoints" / "stage_2_best.zero", "--out", tmp_path / "stage_2.ckpt")
    assert (tmp_path / "best.ckpt").read_bytes() == (tmp_path / "stage_2.ckpt").read_bytes()


def test_an_unstaged_autoencoder_keeps_best_ckpt(tmp_path):
    out = tmp_path / "ae"
    run("train", "--config", "configs/test/tiny.json", *QUIET, "--out", out, "--steps", 6, "--set",
        "train.val_every=2", "--set", "train.ckpt_every=2", timeout=300)
    vals = {m["step"]: m["val_l1"] for m in metrics(out) if "val_l1" in m and m["step"] > 0}
    best = min(sorted(vals), key=lambda s: vals[s])
    assert (out / "checkpoints" / "best.ckpt").read_bytes() == \
        (out / "checkpoints" / ("step_%d.ckpt" % best)).read_bytes(), vals
    assert not list((out / "checkpoints").glob("stage_*"))


def write_volume(path, size):
    nib = pytest.importorskip("nibabel")
    rng = np.random.default_rng(4)
    vol = rng.random((size, size, size)).astype(np.float32)
    nib.save(nib.Nifti1Image(vol, np.eye(4)), str(path))


def test_a_stages_best_loads_in_predict_and_export_at_its_size_and_resumes(tmp_path):
    nib = pytest.importorskip("nibabel")
    pytest.importorskip("safetensors")
    from safetensors import safe_open
    out = tmp_path / "run"
    stages = ["--config", "configs/test/vit3d-diffusion-stages.json", *QUIET]
    run("train", *stages, "--out", out, timeout=300)
    ckpts = out / "checkpoints"
    write_volume(tmp_path / "ct.nii.gz", 32)
    for name, size in (("stage_0_best.ckpt", 16), ("stage_1_best.ckpt", 32), ("best.ckpt", 32)):
        pred = tmp_path / ("pred_" + name)
        p = run("predict", "--ckpt", ckpts / name, "--data", tmp_path / "ct.nii.gz", "--out", pred, "--device", "cpu",
                "--sample-steps", 2, "--set", "data.normalize=none", timeout=300)
        named = "is a checkpoint of stage 0 of its run's train.stages (input 16x16x16)" in p.stdout
        assert named == (size == 16), p.stdout
        assert nib.load(str(pred / "ct_sample.nii.gz")).shape == (size, size, size)
    p = run("export", "--ckpt", ckpts / "stage_0_best.ckpt", "--out", tmp_path / "s0.safetensors")
    assert "stage 0" in p.stdout
    with safe_open(str(tmp_path / "s0.safetensors"), "np") as f:
        assert f.get_tensor("pos_embed.weight").shape == (64, 32)  # 4^3 patches of 16^3
        assert json.loads(f.metadata()["voxscale.config"])["model"]["input_size"] == [16, 16, 16]
    # seed 001's resume from a stage's best: the run goes on from that state as the uninterrupted one did
    again = tmp_path / "again"
    run("train", *stages, "--out", again, "--resume", ckpts / "stage_0_best.ckpt", timeout=300)
    assert (again / "checkpoints" / "step_10.ckpt").read_bytes() == (ckpts / "step_10.ckpt").read_bytes()


@pytest.mark.parametrize("config, sets, words", [
    ("configs/test/tiny.json", ["train.best_metric=accuracy"], "the validation of ae3d logs l1, no accuracy"),
    ("configs/test/resnet-tiny.json", ["model.task=regression", "model.num_classes=1", "train.best_metric=auroc"],
     "the validation of resnet3d with model.task regression logs loss, no auroc"),
    ("configs/test/resnet-tiny.json", ["train.best_metric=cindex"],
     "resnet3d with model.task classification logs loss, accuracy, auroc, no cindex"),
    ("configs/test/vit3d-diffusion-stages.json", ["train.best_metric=l1"], "vit3d_diffusion logs loss, no l1"),
])
def test_a_best_metric_the_family_does_not_log_is_one_line(tmp_path, config, sets, words):
    out = tmp_path / "run"
    p = run("train", "--config", config, *[a for s in sets for a in ("--set", s)], "--out", out, check=False)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert p.returncode == 2 and len(lines) == 1 and words in lines[0], p.stderr
    assert not out.exists()
