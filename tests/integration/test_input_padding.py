"""model.pad_input_channels over the real binary, on the CPU (float32, so `on` is how the path runs here; `auto`
pads only in bf16/fp16): conv_in reads its single input channel zero-padded to 8, which must change nothing but
storage. Training follows the unpadded run's losses, the run says it pads, and checkpoints (whose parameters are
never padded) resume across the setting both ways. tests/unit/test_host.c compares the gradients and the plan."""
import pytest

from conftest import metrics, run

TINY = ["--config", "configs/test/tiny.json", "--set", "train.log_every=1", "--set", "train.grad_accum=2"]


def losses(run_dir):
    return {m["step"]: m["loss"] for m in metrics(run_dir) if "loss" in m}


def close(a, b, rel):
    """Relative difference of every common step's loss at most rel (seen: 0, the padded products being zeros)."""
    assert sorted(a) == sorted(b)
    return all(abs(a[s] - b[s]) <= rel * abs(b[s]) for s in a)


def test_padded_input_trains_as_the_unpadded_model(tmp_path):
    off = run("train", *TINY, "--steps", "6", "--out", tmp_path / "off", "--set", "model.pad_input_channels=off")
    on = run("train", *TINY, "--steps", "6", "--out", tmp_path / "on", "--set", "model.pad_input_channels=on")
    a, b = losses(tmp_path / "off"), losses(tmp_path / "on")
    assert len(a) == 6 and close(a, b, 1e-6), (a, b)
    line = "input padding: encoder.conv_in reads 1 channel(s) zero-padded to 8"
    assert line in on.stdout and "input padding" not in off.stdout
    # auto is off in float32, and detect says so too
    assert "input padding" not in run("detect", "--config", "configs/test/tiny.json", "--device", "cpu").stdout
    assert line in run("detect", "--config", "configs/test/tiny.json", "--device", "cpu",
                       "--set", "model.pad_input_channels=on").stdout


@pytest.mark.parametrize("first,then", [("on", "off"), ("off", "on")])
def test_checkpoints_resume_across_the_padding(tmp_path, first, then):
    full = tmp_path / "full"
    run("train", *TINY, "--steps", "10", "--out", full, "--set", "train.ckpt_every=5",
        "--set", "model.pad_input_channels=" + first)
    p = run("train", *TINY, "--steps", "10", "--out", tmp_path / "resumed", "--resume",
            full / "checkpoints" / "step_5.ckpt", "--set", "model.pad_input_channels=" + then)
    assert "resumed:" in p.stdout
    a, b = losses(full), losses(tmp_path / "resumed")
    assert close({s: a[s] for s in b}, b, 1e-6), (a, b)


def test_a_bad_value_is_one_line_and_exit_2(tmp_path):
    p = run("train", "--config", "configs/test/tiny.json", "--out", tmp_path / "r",
            "--set", "model.pad_input_channels=yes", check=False)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        'voxscale: --set: model.pad_input_channels must be one of auto|on|off, got "yes"']
    assert not (tmp_path / "r").exists()
