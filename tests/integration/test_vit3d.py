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
    (["train.stages=[{\"steps\": 10}, {\"steps\": 10, \"input_size\": [32, 32, 32]}]"], "vit3d keeps model.input_size"),
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
