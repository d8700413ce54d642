"""`voxscale predict` for vit3d_diffusion (issue 21 item 3): configs/test/vit3d-diffusion-tiny.json trained on phantoms,
then DDIM sampling from the two views (DRRs) of validation phantoms written as NIfTI:
- the sample is written on the input's grid (its shape and affine) and predictions.csv holds its DRRs' error against
  the views and its volume MSE beside the baseline's (the constant volume at the input's mean intensity): the tiny
  config as shipped (issue 40 item 4) samples lower on both for every validation phantom;
- the same seed gives the same bytes, another seed another sample, another batch size and two MPI ranks the same
  bytes (the noise is keyed by the volume's place in the list, not its batch, and the kernels cut rows per sample);
- bad input: a volume smaller than the input without data.pad, and more sampling steps than timesteps: one line,
  exit 2."""
import csv
import importlib.util
import os

import shutil

import numpy as np
import pytest

from conftest import mpi, run

pytestmark = pytest.mark.skipif(importlib.util.find_spec("nibabel") is None, reason="nibabel comes with ci/deps.sh")
CFG = os.path.join("configs", "test", "vit3d-diffusion-tiny.json")
CPU = ["--device", "cpu", "--set", "output.tensorboard=0"]
# the config's own 2000 steps (about 10 s on 2 cores); measured with sample seed 11, 10 DDIM steps, the 8 validation
# phantoms: DRR MSE 0.0035 against the mean volume's 0.0275, volume MSE 0.0051 against 0.0120, each volume lower on
# both (32 of 32 phantoms with another training and sample seed). Before issue 40 (hidden 32, the data unscaled, no
# backprojection, leading timesteps) the samples were at DRR MSE 0.27-0.38 and volume MSE ~0.4
TRAIN_STEPS = 2000
N_VOLS = 8


def affine():
    return np.array([[0.8, 0.1, 0, 10], [0, 0.9, 0, -20], [0.05, 0, 1.2, 30], [0, 0, 0, 1]])


def write(path, a):
    import nibabel as nib
    img = nib.Nifti1Image(np.ascontiguousarray(a.transpose(2, 1, 0)), affine())  # ours [d][h][w] -> nibabel x, y, z
    img.header.set_qform(affine(), 1)
    img.header.set_sform(affine(), 4)
    nib.save(img, str(path))


def rows(out):
    with open(os.path.join(out, "predictions.csv")) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The tiny config trained on phantoms, and its validation phantoms as NIfTI files (the trainer's, dumped)."""
    tmp = tmp_path_factory.mktemp("diff")
    out, dump, vols = tmp / "run", tmp / "dump", tmp / "vols"
    dump.mkdir()
    vols.mkdir()
    run("train", "--config", CFG, *CPU, "--out", out, "--set", "train.val_every=%d" % TRAIN_STEPS,
        env=dict(os.environ, VX_TEST_VAL_DUMP=str(dump)), timeout=600)
    val = np.fromfile(dump / "val_input.bin", dtype=np.float32).reshape(-1, 16, 16, 16)
    for i in range(N_VOLS):
        write(vols / ("val%d.nii.gz" % i), val[i])
    return {"ckpt": out / "checkpoints" / ("step_%d.ckpt" % TRAIN_STEPS), "vols": vols, "val": val[:N_VOLS]}


def predict(trained, out, *extra, check=True):
    # the phantoms are the training data as they are (no normalisation): so are these files
    return run("predict", "--ckpt", trained["ckpt"], "--data", trained["vols"], "--out", out, "--device", "cpu",
               "--set", "data.normalize=none", *extra, check=check)


def test_ddim_sample_beats_the_mean_volume_and_keeps_the_grid(trained, tmp_path):
    import nibabel as nib
    pred = tmp_path / "pred"
    p = predict(trained, pred, "--sample-seed", 11)
    got = rows(pred)
    assert [r["sample"] for r in got] == ["val%d_sample.nii.gz" % i for i in range(N_VOLS)]
    assert sum("DDIM 10 steps: DRR MSE" in line for line in p.stdout.splitlines()) == N_VOLS, p.stdout
    col = lambda k: np.array([float(r[k]) for r in got])
    drr, base, mse, base_mse = col("drr_mse"), col("mean_volume_drr_mse"), col("mse"), col("mean_volume_mse")
    print("DRR MSE of the DDIM samples", drr, "mean", drr.mean(), "; of the mean volume", base, "mean", base.mean())
    print("volume MSE of the samples", mse, "mean", mse.mean(), "; of the mean volume", base_mse, "mean", base_mse.mean())
    # every phantom, both measures (issue 40 item 4); measured 0.0035 vs 0.0275 and 0.0051 vs 0.0120 on average
    assert (drr < base).all(), (drr, base)
    assert (mse < base_mse).all(), (mse, base_mse)
    for i in range(N_VOLS):
        img = nib.load(str(pred / ("val%d_sample.nii.gz" % i)))
        assert img.shape == (16, 16, 16) and img.get_data_dtype() == np.float32
        np.testing.assert_allclose(img.affine, affine(), atol=1e-5)
        x = np.asarray(img.dataobj).transpose(2, 1, 0)
        assert np.isfinite(x).all()
        # the volume MSE in the row is this file's against the input
        mse = float(np.mean((x.astype(np.float64) - trained["val"][i]) ** 2))
        assert abs(mse - float(got[i]["mse"])) <= 1e-5 * mse, (mse, got[i]["mse"])


def test_same_seed_same_bytes(trained, tmp_path):
    a, b, c, d = (tmp_path / k for k in "abcd")
    predict(trained, a, "--sample-seed", 5, "--sample-steps", 4)
    predict(trained, b, "--sample-seed", 5, "--sample-steps", 4)
    predict(trained, c, "--sample-seed", 6, "--sample-steps", 4)
    predict(trained, d, "--sample-seed", 5, "--sample-steps", 4, "--batch-size", 1)
    name = "val2_sample.nii.gz"
    assert (a / name).read_bytes() == (b / name).read_bytes()
    assert (a / "predictions.csv").read_bytes() == (b / "predictions.csv").read_bytes()
    assert (a / name).read_bytes() != (c / name).read_bytes()
    # another batch size, and two ranks taking every other volume: the same bytes (issue 41: on AVX2 the BLAS kernels
    # rounded a row by its place in the batch until the Linears' rows were cut per sample)
    assert (a / "predictions.csv").read_bytes() == (d / "predictions.csv").read_bytes()
    for i in range(N_VOLS):
        assert (a / ("val%d_sample.nii.gz" % i)).read_bytes() == (d / ("val%d_sample.nii.gz" % i)).read_bytes(), i
    if shutil.which("mpirun"):
        # at one thread count: the CPU's convolution path is measured per thread count (conv3d_cpu_select.c), and a
        # 1-thread and a 2-thread process can pick different paths under load, which round differently; the CI run
        # that compared a 2-thread process with 1-thread ranks failed so once
        e, f = tmp_path / "e", tmp_path / "f"
        predict(trained, f, "--sample-seed", 5, "--sample-steps", 4, "--threads", 1)
        mpi(2, "predict", "--ckpt", trained["ckpt"], "--data", trained["vols"], "--out", e, "--device", "cpu",
            "--set", "data.normalize=none", "--sample-seed", 5, "--sample-steps", 4, "--batch-size", 3,
            "--threads", 1)
        assert (f / "predictions.csv").read_bytes() == (e / "predictions.csv").read_bytes()
        assert (f / name).read_bytes() == (e / name).read_bytes()


def test_bad_input_is_one_line_exit_2(trained, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    write(small / "s.nii.gz", np.zeros((12, 16, 16), np.float32))
    p = run("predict", "--ckpt", trained["ckpt"], "--data", small / "s.nii.gz", "--out", tmp_path / "o", "--device",
            "cpu", "--set", "data.pad=0", check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "s.nii.gz" in lines[0] and "smaller" in lines[0], p.stderr
    assert not (tmp_path / "o" / "predictions.csv").exists()
    p = predict(trained, tmp_path / "o2", "--sample-steps", 1001, check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "sample_steps" in lines[0], p.stderr


def test_predict_samples_with_the_moving_average(trained, tmp_path):
    """A run with train.ema_decay: predict loads its average and samples with it, and says so; the sample differs
    from the one the raw weights give (the same seed)."""
    out = tmp_path / "ema"
    run("train", "--config", CFG, *CPU, "--out", out, "--steps", 20, "--set", "train.ema_decay=0.5",
        "--set", "train.val_every=0", timeout=300)
    ckpt = out / "checkpoints" / "step_20.ckpt"
    args = ["predict", "--ckpt", ckpt, "--data", trained["vols"], "--device", "cpu", "--set", "data.normalize=none",
            "--sample-steps", "2"]
    p = run(*args, "--out", tmp_path / "a")
    assert "with the weights' moving average (train.ema_decay 0.5)" in p.stdout + p.stderr
    # the raw weights: the export without its average's use (a config keeping none passes the ema.* keys over)
    w = tmp_path / "w.safetensors"
    run("export", "--ckpt", ckpt, "--out", w)
    q = run("predict", "--weights", w, *args[3:], "--out", tmp_path / "b", "--set", "train.ema_decay=0")
    assert "moving average" not in q.stdout + q.stderr and "ema.* keys" in q.stdout + q.stderr
    a, b = rows(tmp_path / "a"), rows(tmp_path / "b")
    assert [r["drr_mse"] for r in a] != [r["drr_mse"] for r in b]
