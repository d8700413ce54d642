"""A vit3d_diffusion cascade (issue 40 item 1, seed 001's stage_configs): configs/test/vit3d-cascade-tiny.json's
stage 2 is another network than stage 1's (hidden 64, 2 blocks, 4^3 patches against hidden 32, 1 block, 2^3), so it
starts from its initialization, conditioned on stage 1's network, frozen:
- the run keeps a best checkpoint per stage and logs the new network; the config it writes holds every stage's
  network;
- stage 2's checkpoints hold stage 1's network as it was handed on (the weights' moving average at the boundary),
  unchanged through stage 2;
- a run resumed at the boundary or inside stage 2 reproduces the uninterrupted one's last checkpoint byte for byte;
  two MPI ranks train what one process trains, across the boundary; a stage of the same network after the cascade's
  new one carries both;
- predict samples through both stages, closer to the truth than the mean volume for every validation phantom on its
  DRRs and its voxels: the same bytes twice (and from the exported weights), and another sample when
  the earlier network held in the checkpoint is changed;
- a stage network for another family, an unknown stage-network key, a stage network that does not divide its volume
  and a cascade under ZeRO: one line, exit 2."""
import importlib.util
import os
import struct
import zlib

import numpy as np
import pytest

from conftest import metrics, mpi, needs_mpirun, run

CFG = os.path.join("configs", "test", "vit3d-cascade-tiny.json")
QUIET = ["--device", "cpu", "--set", "output.tensorboard=0"]
STEPS = 2000  # 1000 per stage; checkpoints every 500
N_VOLS = 8
HEADER = "<8sIIQQqqqqdqqqdQ"  # ckpt.h's CkptHeader (version 3)


def read_ckpt(path):
    """A checkpoint's header fields and its arrays (ckpt.h's layout): params, adam_m, adam_v, buffers."""
    b = path.read_bytes()
    h = struct.unpack_from(HEADER, b)
    header_bytes, count, buffers = h[2], h[3], h[14]
    arr = np.frombuffer(b, dtype="<f4", count=3 * count + buffers, offset=header_bytes)
    assert zlib.crc32(b[:-4]) == struct.unpack_from("<I", b, len(b) - 4)[0]
    return {"step": h[4], "params": arr[:count], "buffers": arr[3 * count:], "bytes": b, "header_bytes": header_bytes,
            "count": count}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cascade")
    out, dump = tmp / "run", tmp / "dump"
    dump.mkdir()
    p = run("train", "--config", CFG, *QUIET, "--out", out, env=dict(os.environ, VX_TEST_VAL_DUMP=str(dump)),
            timeout=600)
    return {"out": out, "log": p.stdout + p.stderr, "dump": dump, "tmp": tmp}


def test_the_second_stage_is_a_new_network_with_a_best_per_stage(trained):
    out, log = trained["out"], trained["log"]
    ck = out / "checkpoints"
    for name in ("stage_0_best.ckpt", "stage_1_best.ckpt", "best.ckpt", "step_1000.ckpt", "step_2000.ckpt"):
        assert (ck / name).exists(), name
    assert "cascade: a new network of 206656 parameters" in log, log
    assert "frozen" in log and "its moving average" in log, log
    import json
    with open(out / "config.json") as f:
        stages = json.load(f)["train"]["stages"]
    assert stages[0]["model"] == {"hidden_size": 32, "blocks": 1, "heads": 2, "patch_size": [2, 2, 2], "mlp_ratio": 2}
    assert stages[1]["model"] == {"hidden_size": 64, "blocks": 2, "heads": 2, "patch_size": [4, 4, 4], "mlp_ratio": 2}
    # stage 1's network: its checkpoints' parameters; stage 2's: another count, with stage 1's moving average at the
    # boundary held unchanged in its first buffer through every step of stage 2
    s1000, s1500, s2000 = (read_ckpt(ck / ("step_%d.ckpt" % s)) for s in (1000, 1500, 2000))
    assert s1000["count"] == 35112 and s2000["count"] == 206656
    ema = s1000["buffers"]  # stage 1's only buffer: the moving average of its flat parameters
    held1500, held2000 = s1500["buffers"][:ema.size], s2000["buffers"][:ema.size]
    assert np.array_equal(held1500, ema) and np.array_equal(held2000, ema)
    assert not np.array_equal(s1000["params"][:100], ema[:100])  # (the average, not the last weights, was handed on)


@pytest.mark.parametrize("at", [1000, 1500])  # the boundary's checkpoint (stage 1's last), one inside stage 2
def test_resume_across_the_cascade_boundary_is_exact(trained, tmp_path, at):
    a, b = trained["out"], tmp_path / "b"
    run("train", "--config", CFG, *QUIET, "--out", b, "--resume", a / "checkpoints" / ("step_%d.ckpt" % at),
        timeout=300)
    assert (a / "checkpoints" / "step_2000.ckpt").read_bytes() == (b / "checkpoints" / "step_2000.ckpt").read_bytes()


def test_a_stage_of_the_same_network_after_a_cascade_carries_both(tmp_path):
    """8^3 small -> 8^3 the model section's network (new, conditioned) -> 16^3 the same network (carried, positions
    resampled), the frozen one carried as it is; a resume inside the last stage is byte-exact."""
    stages = ('[{"input_size": [8, 8, 8], "steps": 6, "model": {"hidden_size": 32, "blocks": 1, "patch_size": [2, 2, 2]}},'
              ' {"input_size": [8, 8, 8], "steps": 6}, {"input_size": [16, 16, 16], "steps": 6}]')
    args = ["train", "--config", CFG, *QUIET, "--set", "train.stages=" + stages, "--set", "train.val_every=3",
            "--set", "train.ckpt_every=3"]
    a, b = tmp_path / "a", tmp_path / "b"
    p = run(*args, "--out", a)
    assert (p.stdout + p.stderr).count("cascade: a new network") == 1
    n = read_ckpt(a / "checkpoints" / "step_6.ckpt")["buffers"].size  # the first network's flat floats (its average)
    held = [read_ckpt(a / "checkpoints" / ("step_%d.ckpt" % s))["buffers"][:n] for s in (6, 12, 18)]
    assert np.array_equal(held[1], held[0]) and np.array_equal(held[2], held[0])
    run(*args, "--out", b, "--resume", a / "checkpoints" / "step_15.ckpt")
    assert (a / "checkpoints" / "step_18.ckpt").read_bytes() == (b / "checkpoints" / "step_18.ckpt").read_bytes()


@needs_mpirun
def test_two_mpi_ranks_train_the_single_process_cascade(tmp_path):
    """Data parallel across the boundary: each rank runs the frozen earlier network on its own samples."""
    stages = ('[{"input_size": [8, 8, 8], "steps": 10, "model": {"hidden_size": 32, "blocks": 1, "patch_size": [2, 2, 2]}},'
              ' {"input_size": [16, 16, 16], "steps": 10}]')
    args = ["train", "--config", CFG, *QUIET, "--set", "train.stages=" + stages, "--set", "train.global_batch=4",
            "--set", "train.log_every=1", "--set", "train.val_every=0", "--set", "train.ckpt_every=10"]
    one, two = tmp_path / "one", tmp_path / "two"
    run(*args, "--set", "train.batch_size=4", "--out", one)
    p = mpi(2, *args, "--out", two)
    assert "cascade: a new network" in p.stdout
    la, lb = ({m["step"]: m["loss"] for m in metrics(d) if "loss" in m} for d in (one, two))
    assert sorted(la) == sorted(lb) == list(range(1, 21))
    assert max(abs(la[s] - lb[s]) / abs(la[s]) for s in la) < 1e-5, (la, lb)
    a, b = (read_ckpt(d / "checkpoints" / "step_20.ckpt") for d in (one, two))
    for k in ("params", "buffers"):
        err = np.abs(a[k].astype(np.float64) - b[k]).max() / np.abs(a[k]).max()
        assert err < 1e-5, (k, err)


@pytest.mark.skipif(importlib.util.find_spec("nibabel") is None, reason="nibabel comes with ci/deps.sh")
def test_predict_samples_through_both_stages(trained, tmp_path):
    import nibabel as nib
    vols = tmp_path / "vols"
    vols.mkdir()
    val = np.fromfile(trained["dump"] / "val_input.bin", dtype=np.float32).reshape(-1, 16, 16, 16)
    for i in range(N_VOLS):
        nib.save(nib.Nifti1Image(np.ascontiguousarray(val[i].transpose(2, 1, 0)), np.eye(4)), str(vols / ("v%d.nii.gz" % i)))
    ck = trained["out"] / "checkpoints" / "step_2000.ckpt"

    def predict(ckpt, out, shape=(16, 16, 16)):  # (the run's config: a checkpoint outside its run directory is read with it)
        p = run("predict", "--ckpt", ckpt, "--config", trained["out"] / "config.json", "--data", vols, "--out", out,
                "--device", "cpu", "--set", "data.normalize=none", "--sample-seed", 11)
        sample = nib.load(str(out / "v0_sample.nii.gz")).get_fdata()
        assert sample.shape == shape and np.isfinite(sample).all()
        return p.stdout + p.stderr, (out / "predictions.csv").read_bytes()

    log, a = predict(ck, tmp_path / "a")
    # seed 001's aim through both stages: every phantom's sample closer to the truth than the mean volume, on its
    # DRRs and its voxels (measured: DRR MSE 0.0037 against 0.0274, volume MSE 0.0052 against 0.0120, sample seed 11;
    # a sampler that lost stage 1's sample after its first step sampled 10x worse than the mean volume)
    import csv
    import io
    rows = list(csv.DictReader(io.StringIO(a.decode())))
    assert len(rows) == N_VOLS
    for r in rows:
        assert float(r["drr_mse"]) < float(r["mean_volume_drr_mse"]), r
        assert float(r["mse"]) < float(r["mean_volume_mse"]), r
    assert "a checkpoint of stage 1 of its run's train.stages (input 16x16x16), a cascade of 2 networks" in log, log
    _, b = predict(ck, tmp_path / "b")
    assert a == b
    # exported: the safetensors file holds both networks, and predict --weights samples the same
    w = tmp_path / "w.safetensors"
    run("export", "--ckpt", ck, "--out", w)
    run("predict", "--weights", w, "--data", vols, "--out", tmp_path / "w", "--device", "cpu", "--set",
        "data.normalize=none", "--sample-seed", 11)
    assert (tmp_path / "w" / "predictions.csv").read_bytes().replace(bytes(w), b"") == a.replace(bytes(ck), b"")
    # stage 1's network as the checkpoint holds it (its first buffer), halved: stage 2's input is stage 1's sample
    c = read_ckpt(ck)
    n_prev = read_ckpt(trained["out"] / "checkpoints" / "step_1000.ckpt")["buffers"].size
    raw = bytearray(c["bytes"][:-4])
    at = c["header_bytes"] + 4 * 3 * c["count"]
    held = np.frombuffer(bytes(raw[at:at + 4 * n_prev]), dtype="<f4") * np.float32(0.5)
    raw[at:at + 4 * n_prev] = held.astype("<f4").tobytes()
    changed = tmp_path / "changed.ckpt"
    changed.write_bytes(bytes(raw) + struct.pack("<I", zlib.crc32(bytes(raw))))
    _, d = predict(changed, tmp_path / "d")
    assert d != a
    # stage 1's best: its own 8^3 model, read at its stage's size
    log, _ = predict(trained["out"] / "checkpoints" / "stage_0_best.ckpt", tmp_path / "e", shape=(8, 8, 8))
    assert "checkpoint of stage 0" in log, log


@pytest.mark.parametrize("sets, words", [
    (['model.family=vit3d', 'train.stages=[{"steps": 2, "model": {"hidden_size": 32}}]'],
     "train.stages[0].model: only vit3d_diffusion's stages may have networks of their own"),
    (['train.stages=[{"steps": 2, "model": {"depth": 2}}]'], 'unknown key "train.stages[0].model.depth"'),
    (['train.stages=[{"steps": 2, "model": {"patch_size": [3, 3, 3]}}]'],
     "train.stages[0].input_size[0] = 16 is not divisible by its model.patch_size[0] = 3"),
    (['train.stages=[{"steps": 2, "model": {"heads": 3}}]'], "train.stages[0]'s hidden_size 64 is not divisible by its heads 3"),
    (['train.stages=[{"steps": 2}, {"steps": 2, "model": {"hidden_size": 32}}]', "dist.zero=1"],
     "train.stages[1] starts a new network of the cascade, which sharded data parallelism does not carry"),
])
def test_bad_cascades_are_one_line(tmp_path, sets, words):
    out = tmp_path / "run"
    args = ["train", "--config", os.path.join("configs", "test", "vit3d-diffusion-tiny.json"), *QUIET, "--out", out]
    for s in sets:
        args += ["--set", s]
    p = run(*args, check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    assert words in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not out.exists()
