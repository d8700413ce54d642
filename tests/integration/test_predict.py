"""test_predict.py (issue 28): `voxscale predict` and the safetensors files it and --init-from read.
- ae3d on NIfTI volumes: the reconstruction is bit for bit the trainer's validation forward of the same crop
  (VX_TEST_VAL_DUMP), its L1 the trainer's val/l1, and PyTorch's AE3D loaded from the export reconstructs the same;
  the written NIfTI keeps the input's header (qform and sform codes, units, description) and its affine, moved to the
  crop (equal to the input's where nothing is cropped) and, for the latent mean, to the coarser grid (nibabel reads
  them);
- resnet3d: two MPI ranks and other batch sizes give one process's predictions.csv, byte for byte;
- safetensors written by the reference library (F64, BF16) initialise a model to exactly their values, and our
  exports read back there with their metadata;
- bad input: damaged safetensors files (header length, JSON, dtype, shape, overlap, offsets out of the file),
  weights of another family, a missing volume, an --out holding predictions: one line naming the file (and key or
  row), exit 2, nothing written; damage found only by decoding (non-finite voxels): the same line, no
  predictions.csv, and the rerun in the same --out needs no cleanup; data.skip_bad leaves a volume out with a
  warning."""
import csv
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, VOXSCALE, metrics, run

sys.path.insert(0, os.path.join(ROOT, "bench", "reference"))
pytestmark = pytest.mark.skipif(importlib.util.find_spec("safetensors") is None or
                                importlib.util.find_spec("nibabel") is None,
                                reason="safetensors and nibabel come with ci/deps.sh")
CPU = ["--device", "cpu", "--set", "output.tensorboard=0"]
TINY = "configs/test/tiny.json"
RESNET = "configs/test/resnet-tiny.json"


def affine():
    a = np.array([[0.8, 0.1, 0, 10], [0, 0.9, 0, -20], [0.05, 0, 1.2, 30], [0, 0, 0, 1]])
    return a


def write_volume(path, shape, seed, value=None):
    import nibabel as nib
    rng = np.random.default_rng(seed)
    a = (rng.normal(size=shape) * 40 + 100).astype(np.float32) if value is None else value
    img = nib.Nifti1Image(a, affine())
    img.header.set_qform(affine(), 1)
    img.header.set_sform(affine(), 4)
    img.header.set_xyzt_units("mm", "sec")
    img.header["descrip"] = b"voxscale test volume"
    nib.save(img, path)
    return a


def rows(out):
    with open(os.path.join(out, "predictions.csv")) as f:
        return list(csv.DictReader(f))


def test_ae3d_predict_is_the_validation_forward_and_keeps_the_header(tmp_path):
    import nibabel as nib
    vols = tmp_path / "vols"
    vols.mkdir()
    shapes = [(10, 9, 8), (8, 12, 8), (9, 8, 11), (8, 8, 8), (8, 8, 8), (12, 10, 9)]
    for i, s in enumerate(shapes):
        write_volume(str(vols / ("v%d.nii.gz" % i)), s, i)
    (vols / "list.csv").write_text("path,split\n" + "".join("v%d.nii.gz,%s\n" % (i, "val" if i >= 4 else "train")
                                                              for i in range(6)))
    (vols / "val.csv").write_text("path\nv4.nii.gz\nv5.nii.gz\n")
    out, dump = tmp_path / "run", tmp_path / "dump"
    dump.mkdir()
    env = dict(os.environ, VX_TEST_VAL_DUMP=str(dump))
    run("train", "--config", TINY, "--out", out, "--steps", 6, "--set", "data.source=csv",
        "--set", "data.csv=%s" % (vols / "list.csv"), "--set", "train.val_every=6", *CPU, env=env)
    val_l1 = [m["val_l1"] for m in metrics(out) if "val_l1" in m][-1]
    pred = tmp_path / "pred"
    p = run("predict", "--ckpt", out / "checkpoints" / "step_6.ckpt", "--data", vols / "val.csv", "--out", pred,
            "--device", "cpu")
    assert "eta" in p.stdout and "predict: 2 volumes in" in p.stdout
    got = rows(pred)
    assert [r["reconstruction"] for r in got] == ["v4_recon.nii.gz", "v5_recon.nii.gz"]
    # the trainer's validation figure is the mean of the per-volume ones (all volumes have the same voxel count)
    assert abs(np.mean([float(r["l1"]) for r in got]) - val_l1) <= 1e-6 * val_l1
    # bit for bit the trainer's validation forward of the same crops
    want = np.fromfile(dump / "val_recon.bin", dtype=np.float32).reshape(2, 8, 8, 8)
    inputs = np.fromfile(dump / "val_input.bin", dtype=np.float32).reshape(2, 8, 8, 8)
    for k, i in enumerate((4, 5)):
        rec = nib.load(str(pred / ("v%d_recon.nii.gz" % i)))
        assert rec.get_data_dtype() == np.float32
        assert np.array_equal(np.asarray(rec.dataobj).transpose(2, 1, 0), want[k]), i
    # the same reconstruction from PyTorch's AE3D holding the exported weights
    import ae3d
    from safetensors.torch import load_file
    run("export", "--ckpt", out / "checkpoints" / "step_6.ckpt", "--out", tmp_path / "ae.safetensors")
    model = ae3d.AE3D(json.load(open(out / "config.json"))["model"])
    model.load_state_dict(load_file(str(tmp_path / "ae.safetensors")), strict=True)
    with torch.no_grad():
        ref = model(torch.from_numpy(inputs)[:, None])[0][:, 0].numpy()
    assert np.abs(ref - want).max() < 1e-5, np.abs(ref - want).max()
    # headers: v4 is the input size (no crop: the input's affine), v5 is cropped at x, y, z = 2, 1, 0
    for i, off in ((4, (0, 0, 0)), (5, (2, 1, 0))):
        src = nib.load(str(vols / ("v%d.nii.gz" % i)))
        shift = np.eye(4)
        shift[:3, 3] = off
        for name, grid in (("recon", np.eye(4)), ("mu", np.diag([2.0, 2.0, 2.0, 1.0]))):
            img = nib.load(str(pred / ("v%d_%s.nii.gz" % (i, name))))
            h = img.header
            assert int(h["qform_code"]) == 1 and int(h["sform_code"]) == 4
            assert h.get_xyzt_units() == ("mm", "sec") and bytes(h["descrip"]).rstrip(b"\0") == b"voxscale test volume"
            np.testing.assert_allclose(img.affine, src.affine @ shift @ grid, atol=1e-5)
            np.testing.assert_allclose(img.get_qform(), src.get_qform() @ shift @ grid, atol=1e-5)
            if i == 4 and name == "recon":
                np.testing.assert_allclose(img.affine, src.affine, atol=1e-6)
        assert nib.load(str(pred / ("v%d_mu.nii.gz" % i))).shape == (4, 4, 4, 2)  # latent_channels as the 4th axis


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")
def test_resnet_predict_ranks_and_batches_agree(tmp_path):
    out = tmp_path / "run"
    run("train", "--config", RESNET, "--out", out, "--steps", 4, *CPU)
    vols = tmp_path / "vols"
    vols.mkdir()
    for i in range(7):
        write_volume(str(vols / ("c%d.nii.gz" % i)), (16 + i, 16, 17), 10 + i)
    ck = out / "checkpoints" / "step_4.ckpt"
    one = tmp_path / "one"
    run("predict", "--ckpt", ck, "--data", vols, "--out", one, "--batch-size", 3, "--device", "cpu")
    two = tmp_path / "two"
    p = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", VOXSCALE, "predict", "--ckpt",
                        str(ck), "--data", str(vols), "--out", str(two), "--batch-size", "2", "--device", "cpu",
                        "--threads", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "shared by the ranks" in p.stdout
    a, b = rows(one), rows(two)
    assert len(a) == 7 and [r["path"] for r in a] == [r["path"] for r in b]
    # a volume's outputs are the same bytes in any slot of any batch on any rank (issue 41: the kernels' rows are cut
    # per sample), so the two tables are the same text
    assert (one / "predictions.csv").read_bytes() == (two / "predictions.csv").read_bytes(), (a, b)


def test_reference_files_read_and_ours_read_there(tmp_path):
    import resnet3d
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
    cfg = {"model": dict(json.load(open(os.path.join(ROOT, RESNET)))["model"], spatial_dims=3, conv1_t_size=7,
                         conv1_t_stride=1, no_max_pool=0, shortcut_type="B", bias_downsample=1)}
    torch.manual_seed(1)
    model = resnet3d.build_model(cfg)
    sd = model.state_dict()
    for dtype in (torch.float64, torch.bfloat16):
        st = tmp_path / ("w_%s.safetensors" % str(dtype).split(".")[1])
        save_file({k: v.to(dtype) if v.is_floating_point() else v for k, v in sd.items()}, str(st))
        out = tmp_path / ("run_%s" % st.stem)
        run("train", "--config", RESNET, "--out", out, "--steps", 1, "--init-from", st, "--set", "train.lr=0",
            "--set", "train.min_lr=0", "--set", "model.bn_momentum=0", *CPU)
        back = tmp_path / ("back_%s.safetensors" % st.stem)
        run("export", "--ckpt", out / "checkpoints" / "step_1.ckpt", "--out", back)
        got = load_file(str(back))
        for k, v in sd.items():
            if v.is_floating_point():
                assert torch.equal(got[k], v.to(dtype).float()), (dtype, k)
        with safe_open(str(back), "pt") as f:
            meta = f.metadata()
            assert meta["format"] == "pt" and meta["voxscale.family"] == "resnet3d" and meta["voxscale.step"] == "1"
            assert json.loads(meta["voxscale.config"])["model"]["depth"] == 10
            assert sorted(f.keys()) == sorted(sd)


def _damaged(tmp_path):
    """The damaged forms of a real export (every one a file the reader must refuse)"""
    out = tmp_path / "run"
    run("train", "--config", RESNET, "--out", out, "--steps", 1, *CPU)
    good = tmp_path / "good.safetensors"
    run("export", "--ckpt", out / "checkpoints" / "step_1.ckpt", "--out", good)
    data = good.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header, body = json.loads(data[8:8 + n]), data[8 + n:]

    def build(h, b=body):
        text = json.dumps(h).encode()
        return struct.pack("<Q", len(text)) + text + b

    first = next(k for k in header if k != "__metadata__")
    second = [k for k in header if k != "__metadata__"][1]
    cases = {"header length": (struct.pack("<Q", len(data)) + data[8:], "header length"),
             "JSON": (struct.pack("<Q", n) + data[8:8 + n - 9] + b"@" * 9 + body, "JSON"),
             "dtype": (build(dict(header, **{first: dict(header[first], dtype="F99")})), "dtype"),
             "shape": (build(dict(header, **{first: dict(header[first], shape=[3, 3])})), "shape"),
             "overlap": (build(dict(header, **{second: dict(header[second], data_offsets=[
                 header[first]["data_offsets"][0], header[first]["data_offsets"][0] + header[second]["data_offsets"][1]
                 - header[second]["data_offsets"][0]])})), "overlap"),
             "out of the file": (build(header, body[:-16]), "past the end of the file")}
    return good, cases


def test_bad_weights_files_are_one_line_exit_2(tmp_path):
    good, cases = _damaged(tmp_path)
    vols = tmp_path / "vols"
    vols.mkdir()
    write_volume(str(vols / "a.nii.gz"), (16, 16, 16), 0)
    for name, (data, said) in cases.items():
        bad = tmp_path / ("bad %s.safetensors" % name)
        bad.write_bytes(data)
        for args in (["train", "--config", RESNET, "--out", tmp_path / "never", "--init-from", bad, *CPU],
                     ["predict", "--weights", bad, "--config", RESNET, "--data", vols, "--out", tmp_path / "never"]):
            p = run(*args, check=False)
            lines = p.stderr.strip().splitlines()
            assert p.returncode == 2 and len(lines) == 1, (name, p.stderr)
            assert str(bad) in lines[0] and said in lines[0], (name, lines[0])
            assert not (tmp_path / "never").exists(), name
    # the good file itself predicts
    run("predict", "--weights", good, "--data", vols, "--out", tmp_path / "ok", "--device", "cpu")


def test_predict_bad_input(tmp_path):
    out = tmp_path / "run"
    run("train", "--config", RESNET, "--out", out, "--steps", 1, *CPU)
    ck = out / "checkpoints" / "step_1.ckpt"
    vols = tmp_path / "vols"
    vols.mkdir()
    for i in range(3):
        write_volume(str(vols / ("a%d.nii.gz" % i)), (16, 16, 16), i)
    (vols / "list.csv").write_text("path\na0.nii.gz\nmissing.nii.gz\na2.nii.gz\n")
    never = tmp_path / "never"
    p = run("predict", "--ckpt", ck, "--data", vols / "list.csv", "--out", never, "--device", "cpu", check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "missing.nii.gz" in lines[0] and "row 3" in lines[0], p.stderr
    assert not never.exists()
    skip = tmp_path / "skip"
    p = run("predict", "--ckpt", ck, "--data", vols / "list.csv", "--out", skip, "--device", "cpu",
            "--set", "data.skip_bad=1")
    assert "warning:" in p.stderr and "missing.nii.gz" in p.stderr and "skipped (data.skip_bad)" in p.stderr
    assert [os.path.basename(r["path"]) for r in rows(skip)] == ["a0.nii.gz", "a2.nii.gz"]
    # an --out holding predictions already is not overwritten
    p = run("predict", "--ckpt", ck, "--data", vols / "a0.nii.gz", "--out", skip, "--device", "cpu", check=False)
    assert p.returncode == 2 and "already holds predictions.csv" in p.stderr
    # non-finite voxels: data.nonfinite's rules
    nan = np.full((16, 16, 16), 1.0, dtype=np.float32)
    nan[3, 4, 5] = np.nan
    write_volume(str(vols / "nan.nii.gz"), nan.shape, 0, value=nan)
    # (found only by decoding, after the folder was made: no predictions.csv, and the rerun there needs no cleanup)
    late = tmp_path / "late"
    p = run("predict", "--ckpt", ck, "--data", vols / "nan.nii.gz", "--out", late, "--device", "cpu", check=False)
    assert p.returncode == 2 and "nan.nii.gz" in p.stderr and "not finite" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not (late / "predictions.csv").exists()
    p = run("predict", "--ckpt", ck, "--data", vols / "nan.nii.gz", "--out", late, "--device", "cpu",
            "--set", "data.nonfinite=zero")
    assert "set to 0 (data.nonfinite=zero)" in p.stderr and len(rows(late)) == 1
    # weights of another family
    ae = tmp_path / "ae"
    run("train", "--config", TINY, "--out", ae, "--steps", 1, *CPU)
    run("export", "--ckpt", ae / "checkpoints" / "step_1.ckpt", "--out", tmp_path / "ae.safetensors")
    p = run("predict", "--weights", tmp_path / "ae.safetensors", "--config", RESNET, "--data", vols / "a0.nii.gz",
            "--out", never, "--device", "cpu", check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "ae.safetensors" in lines[0] and "another family" in lines[0]
    assert not never.exists()
    # flags: one of --ckpt and --weights, --data and --out
    for args in (["--data", vols, "--out", never], ["--ckpt", ck, "--out", never], ["--ckpt", ck, "--data", vols]):
        p = run("predict", *args, check=False)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_predict_plans_and_allocates_the_forward_only(tmp_path):
    """Issue 36: predict planned (and allocated) the gradients and AdamW's state of training, 506 MiB for a model
    whose forward needs a fraction of it. Its plan is the forward's: the parameters (and buffers) once, an arena
    without gradients."""
    run("train", "--config", RESNET, "--steps", 1, "--out", tmp_path / "r", *CPU)
    write_volume(str(tmp_path / "v.nii.gz"), (16, 16, 16), 1)
    train_mib = lambda out: float(re.search(r"; ([\d.]+) MiB of device memory planned", out).group(1))  # noqa: E731
    detect = run("detect", "--config", RESNET, "--device", "cpu").stdout
    p = run("predict", "--ckpt", tmp_path / "r" / "checkpoints" / "step_1.ckpt", "--data", tmp_path / "v.nii.gz",
            "--out", tmp_path / "p", "--device", "cpu", "-v")
    plan = next(l for l in p.stdout.splitlines() if l.startswith("plan: "))
    assert plan.startswith("plan: inference (the forward only: no gradients, no optimizer state); float32;"), plan
    params = int(re.search(r"^model: (\d+) parameters", p.stdout, re.M).group(1))
    # training holds the parameters, their gradients and two moments: predict saves at least the three latter
    assert train_mib(p.stdout) <= train_mib(detect) - 3 * params * 4 / 1048576 + 0.05, (p.stdout, detect)
    arena = re.search(r"^memory: arena [\d.]+ MiB planned \([\d.]+ MiB without reuse\) \+ [\d.]+ MiB parameters = ",
                      p.stdout, re.M)
    assert arena, p.stdout
    assert len(rows(tmp_path / "p")) == 1
