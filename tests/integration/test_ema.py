"""train.ema_decay (issue 21): the weights' exponential moving average as the model buffer ema.flat. After every
optimizer step ema = decay * ema + (1 - decay) * weights, checked on exported checkpoints of consecutive steps; the
average is in the checkpoint (a resumed run reproduces the uninterrupted one's bytes), exported as ema.<name> in each
parameter's torch shape, loaded back by --init-from into a run that keeps one and passed over, said, by one that
does not."""
import os

import numpy as np
import pytest

from conftest import run

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
