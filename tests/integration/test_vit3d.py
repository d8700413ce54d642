"""The vit3d family's skeleton (issue 21) through `voxscale train` on the CPU: configs/test/vit3d-tiny.json trains
(the validation L1 falls), a resumed run reproduces the uninterrupted one's checkpoint byte for byte, and bad vit3d
keys are one line and exit 2 before anything is written. Its gradients and ops are checked in tests/unit/test_vit3d.c."""
import os

import pytest

from conftest import ROOT, metrics, run

CFG = os.path.join("configs", "test", "vit3d-tiny.json")
QUIET = ["--device", "cpu", "--set", "output.tensorboard=0"]


def test_tiny_vit3d_trains(tmp_path):
    out = tmp_path / "run"
    run("train", "--config", CFG, *QUIET, "--out", out, timeout=300)
    rows = metrics(out)
    val = [r["val_l1"] for r in rows if "val_l1" in r]
    loss = [r["loss"] for r in rows if "loss" in r]
    assert len(val) == 3 and val[-1] < 0.5 * val[0], val
    assert loss[-1] < loss[0], loss
    assert (out / "checkpoints" / "step_60.ckpt").exists()


def test_stages_grow_the_volume_and_resume_exactly(tmp_path):
    # 8^3 -> 16^3: pos_embed resampled from 2^3 to 4^3 patches at the boundary; a resume from the boundary's
    # checkpoint (the first stage's layout) reaches the uninterrupted run's last checkpoint byte for byte
    a, b = tmp_path / "a", tmp_path / "b"
    common = ["train", "--config", CFG, *QUIET, "--set", "train.ckpt_every=3", "--set", "train.val_every=0",
              "--set", 'train.stages=[{"steps": 3, "input_size": [8, 8, 8]}, {"steps": 3}]']
    p = run(*common, "--out", a, timeout=300)
    assert "stage 2/2: input 16x16x16" in p.stdout, p.stdout
    run(*common, "--out", b, "--resume", a / "checkpoints" / "step_3.ckpt", timeout=300)
    assert (a / "checkpoints" / "step_6.ckpt").read_bytes() == (b / "checkpoints" / "step_6.ckpt").read_bytes()


def test_resume_is_exact(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    common = ["train", "--config", CFG, *QUIET, "--steps", "20", "--set", "train.ckpt_every=10",
              "--set", "train.val_every=0"]
    run(*common, "--out", a, timeout=300)
    run(*common, "--out", b, "--resume", a / "checkpoints" / "step_10.ckpt", timeout=300)
    assert (a / "checkpoints" / "step_20.ckpt").read_bytes() == (b / "checkpoints" / "step_20.ckpt").read_bytes()


@pytest.mark.parametrize("sets, words", [
    (["model.heads=3"], "model.hidden_size 32 is not divisible by model.heads 3"),
    (["model.patch_size=[4, 5, 4]"], "model.input_size[1] = 16 is not divisible by model.patch_size[1] = 5"),
    (["train.stages=[{\"steps\": 10, \"input_size\": [32, 32, 32]}, {\"steps\": 10}]"],
     "train.stages are out of order: stage 1's volume 16x16x16 is smaller than stage 0's 32x32x32"),
])
def test_bad_vit3d_keys_are_one_line(tmp_path, sets, words):
    out = tmp_path / "run"
    args = ["train", "--config", CFG, *QUIET, "--out", out]
    for s in sets:
        args += ["--set", s]
    p = run(*args, check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and words in lines[0], p.stderr
    assert not out.exists()
