"""test_resnet3d.py: the resnet3d family in training: SyncBatchNorm on 2 and 3 MPI ranks with the batch split
equals BatchNorm on one rank with the global batch (losses, gradient norms, running statistics, parameters), while
plain BatchNorm on 2 ranks does not; the Cox loss over the global batch on 2 ranks equals one rank's; resume is
exact with the running statistics in the checkpoint; the validation figures reach metrics.jsonl and best.ckpt is
kept; bad head settings are one line with exit 2."""
import functools
import json
import os
import struct

import numpy as np
import pytest

import conftest
from conftest import metrics, run

TINY = "configs/test/resnet-tiny.json"
QUIET = ["--threads", "1", "--set", "train.val_samples=0", "--set", "output.tensorboard=0", "--set",
         "train.log_every=1"]
HEAD = struct.Struct("<8sII")


mpi = functools.partial(conftest.mpi, timeout=300)


def checkpoint(path):
    """(parameters, buffers) of a checkpoint as float arrays."""
    data = open(path, "rb").read()
    magic, version, hb = HEAD.unpack_from(data)
    count = struct.unpack_from("<Q", data, 16)[0]
    nbuf = struct.unpack_from("<Q", data, hb - 8)[0] if version >= 3 else 0
    floats = np.frombuffer(data, dtype="<f4", count=3 * count + nbuf, offset=hb)
    return floats[:count], floats[3 * count:]


def curve(out, key):
    return {m["step"]: m[key] for m in metrics(out) if key in m}


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def compare(a, b, steps):
    """max relative differences of two runs: losses and gradient norms of every step, parameters and running
    statistics after the last, and step 1's running statistics and (where the runs dumped them, VX_TEST_GRAD_DUMP
    into the run directory) gradients, computed from the same parameters: after step 1 AdamW parts ReLU nets at
    parameters whose gradient is zero in exact arithmetic (a dead unit), float noise it normalises into steps of lr"""
    la, lb = curve(a, "loss"), curve(b, "loss")
    ga, gb = curve(a, "grad_norm"), curve(b, "grad_norm")
    assert sorted(la) == sorted(lb) == list(range(1, steps + 1))
    pa, ba = checkpoint(a / "checkpoints" / ("step_%d.ckpt" % steps))
    pb, bb = checkpoint(b / "checkpoints" / ("step_%d.ckpt" % steps))
    err = {"loss": max(abs(la[s] - lb[s]) / abs(lb[s]) for s in la),
           "grad_norm": max(abs(ga[s] - gb[s]) / abs(gb[s]) for s in ga),
           "grad_norm_1": abs(ga[1] - gb[1]) / abs(gb[1]), "running_end": rel(ba, bb), "params_end": rel(pa, pb)}
    if (a / "checkpoints" / "step_1.ckpt").exists():  # the first step's statistics, from the same parameters
        err["running"] = rel(checkpoint(a / "checkpoints" / "step_1.ckpt")[1],
                             checkpoint(b / "checkpoints" / "step_1.ckpt")[1])
    if (a / "grad_1.rank0.bin").exists() and (b / "grad_1.rank0.bin").exists():
        err["gradient"] = rel(np.fromfile(a / "grad_1.rank0.bin", dtype="<f4"),
                              np.fromfile(b / "grad_1.rank0.bin", dtype="<f4"))
    return err


def dumping(out):
    """an environment that makes a run dump its gradients into its own directory (made first), its convolutions on
    one CPU path: each run otherwise times im2col against oneDNN per shape and may choose otherwise than the run it is
    compared with (a one-rank run, its nudged twin), whose different rounding then exceeded the spread once under
    AVX2 in CI"""
    out.mkdir(parents=True)
    return dict(os.environ, VX_TEST_GRAD_DUMP=str(out), VX_CONV_CPU="im2col")


# AdamW's epsilon at 1e-3: at PyTorch's 1e-8 a gradient that is zero in exact arithmetic (a bias before a BatchNorm, a
# dead unit) is rounding noise that AdamW normalises into a full step of lr, so the runs' sums in another order part
# by chance (measured: the grad norm of step 4 by 2.2e-4 on the Xeon, 9.1e-4 under forced AVX2 here)
SYNC = ["--set", "model.sync_bn=1", "--set", "train.global_batch=6", "--set", "train.ckpt_every=1",
        "--set", "train.adam_eps=1e-3"]
# What the ranks' runs may differ from one rank by: float32 rounding (FLOOR), or NUDGE_FACTOR times what one ulp on
# every initial weight does to the one-rank run itself, measured in the same session on the same machine. This net's
# BatchNorms see one voxel per sample in layer4 (a handful of values per channel), which magnifies rounding, so a
# figure typed in from one machine failed on another (issue 41: 1.026e-5 against 1e-5 on an AVX2 EPYC). Measured
# here (natively and under forced AVX2): the ranks 7e-8 to 1.6e-6 at step 1 and 6.6e-7 to 1.7e-5 over 4 steps, the
# nudge 3.2e-7 to 4.9e-6 and 3.9e-6 to 7.5e-5; plain BatchNorm on 2 ranks differs by 0.15 to 2.2.
FLOOR, NUDGE_FACTOR = 1e-6, 10


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = tmp_path_factory.mktemp("single") / "run"
    run("train", "--config", TINY, "--steps", "4", "--out", out, *SYNC, *QUIET, timeout=300, env=dumping(out))
    return out


def nudged_spread(tmp_path, reference, args, steps):
    """compare() of the reference against itself with every initial weight one float up (VX_TEST_NUDGE_INIT)"""
    out = tmp_path / "nudged"
    env = dumping(out)
    env["VX_TEST_NUDGE_INIT"] = "1"
    p = run("train", *args, "--out", out, timeout=300, env=env)
    assert "VX_TEST_NUDGE_INIT" in p.stdout
    return compare(out, reference, steps)


@pytest.fixture(scope="module")
def single_spread(tmp_path_factory, single):
    return nudged_spread(tmp_path_factory.mktemp("nudged"), single, ["--config", TINY, "--steps", "4", *SYNC, *QUIET],
                         4)


def assert_within_spread(err, spread, keys):
    bound = {k: max(FLOOR, NUDGE_FACTOR * spread[k]) for k in keys}
    bad = {k: (err[k], bound[k]) for k in keys if not err[k] <= bound[k]}
    assert not bad, "beyond the bound (error, bound): %s; all errors %s; one ulp's %s; ISA %s" % (
        bad, err, spread, os.environ.get("VX_CPU_ISA", "native"))


@pytest.mark.parametrize("world", [2, 3])
def test_sync_batchnorm_equals_one_rank_with_the_global_batch(tmp_path, single, single_spread, world):
    out = tmp_path / "run"
    mpi(world, "train", "--config", TINY, "--steps", "4", "--out", out, *SYNC, *QUIET, env=dumping(out))
    err = compare(out, single, 4)
    print("\nSyncBatchNorm on %d ranks vs one rank: %s; one ulp on the weights: %s" % (world, err, single_spread))
    # step 1 (the same parameters on both sides: gradient, its norm, the running statistics) and the 4 steps' losses
    # and gradient norms, each within the bound above
    assert_within_spread(err, single_spread, ("gradient", "grad_norm_1", "running", "loss", "grad_norm"))


def test_plain_batchnorm_on_two_ranks_differs(tmp_path, single):
    """The check above can fail: each rank normalising with its own half of the batch is another model."""
    out = tmp_path / "run"
    mpi(2, "train", "--config", TINY, "--steps", "4", "--out", out, *SYNC, "--set", "model.sync_bn=0", *QUIET,
        env=dumping(out))
    err = compare(out, single, 4)
    print("\nplain BatchNorm on 2 ranks vs one rank: %s" % err)
    assert err["gradient"] > 1e-3 and err["loss"] > 1e-4 and err["running"] > 1e-4, err


def test_cox_loss_runs_over_the_global_batch(tmp_path):
    """Survival on 2 ranks (each 3 of the 6 samples) trains as one rank with all 6: the risk scores are gathered."""
    args = ["--config", TINY, "--steps", "3", "--set", "model.task=survival", "--set", "model.num_classes=1", *SYNC,
            *QUIET]
    one, two = tmp_path / "one", tmp_path / "two"
    run("train", "--out", one, *args, timeout=300, env=dumping(one))
    mpi(2, "train", "--out", two, *args, env=dumping(two))
    err = compare(two, one, 3)
    assert_within_spread(err, nudged_spread(tmp_path, one, args, 3), ("gradient", "loss"))


def test_resume_is_exact_with_the_running_statistics(tmp_path):
    """Dropout's keyed masks and the running statistics carry the resumed run onto the uninterrupted one's bytes."""
    full, half = tmp_path / "full", tmp_path / "half"
    common = ["--config", TINY, "--steps", "6", "--set", "model.dropout=0.3", "--set", "train.ckpt_every=3", *QUIET]
    run("train", "--out", full, *common, timeout=300)
    run("train", "--out", half, "--resume", full / "checkpoints" / "step_3.ckpt", *common, timeout=300)
    a = open(full / "checkpoints" / "step_6.ckpt", "rb").read()
    b = open(half / "checkpoints" / "step_6.ckpt", "rb").read()
    assert a == b
    params, bufs = checkpoint(full / "checkpoints" / "step_6.ckpt")
    assert bufs.size > 0 and np.all(np.isfinite(bufs))


def test_validation_figures_and_best_checkpoint(tmp_path):
    out = tmp_path / "run"
    p = run("train", "--config", TINY, "--out", out, "--set", "output.tensorboard=0", timeout=300)
    vals = [m for m in metrics(out) if "val_accuracy" in m]
    assert [m["step"] for m in vals] == [0, 6, 12]
    for m in vals:
        assert 0 <= m["val_accuracy"] <= 1 and 0 <= m["val_auroc"] <= 1 and m["val_loss"] > 0
    assert (out / "checkpoints" / "best.ckpt").exists()
    assert "| accuracy" in p.stdout and "recon" not in p.stdout


@pytest.mark.parametrize("sets, words", [
    (["model.task=survival", "model.num_classes=2"], "model.num_classes to 1"),
    (["model.task=classification", "model.num_classes=1"], "num_classes >= 2"),
    (["model.class_weights=[1, 2]", "model.num_classes=3"], "class_weights has 2 entries"),
    (["model.pos_weight=[1, 2, 3]"], "model.task multilabel"),
    (["model.depth=20"], "depth 10, 18, 34, 50 or 101"),
    (["model.spatial_dims=2"], "depth 1"),
    (["model.shortcut_type=A"], "must be one of B"),
    (["model.family=densenet", "model.depth=50"], "depth 121, 169 or 201"),
    (["model.family=densenet", "model.block_config=[2, 2.5]"], "a whole number"),
    (["model.family=densenet", "model.block_config=[2, 0]"], "model.block_config"),
    (["model.family=densenet", "model.block_config=[64]"], "model.block_config"),
    (["model.family=densenet", "model.block_config=[1, 1, 1, 1, 1, 1, 1, 1, 1]"], "at most 8"),
    (["model.family=densenet", "model.block_config=[1, 1, 1, 1, 1, 1]"], "too small for densenet"),
    (["model.family=densenet", "model.dropout_prob=1"], "model.dropout_prob"),
])
def test_bad_head_settings_are_one_line(tmp_path, sets, words):
    args = [a for s in sets for a in ("--set", s)]
    p = run("train", "--config", TINY, "--out", tmp_path / "run", *args, check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and words in lines[0], p.stderr
    assert not (tmp_path / "run").exists()


def write_labelled_volumes(folder, rows):
    """NIfTI volumes of 16^3 (bright boxes whose size gives the class) and a manifest: path, split, then the label
    columns given per row (dicts)."""
    nib = pytest.importorskip("nibabel")
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    keys = list(rows[0][1].keys())
    lines = ["path,split," + ",".join(keys)]
    for i, (split, labels) in enumerate(rows):
        vol = rng.normal(0.1, 0.02, (16, 16, 16)).astype(np.float32)
        r = 3 + i % 4
        vol[8 - r:8 + r, 8 - r:8 + r, 8 - r:8 + r] += 1.0
        nib.save(nib.Nifti1Image(vol, np.eye(4)), str(folder / ("v%02d.nii" % i)))
        lines.append("v%02d.nii,%s,%s" % (i, split, ",".join(str(labels[k]) for k in keys)))
    (folder / "list.csv").write_text("\n".join(lines) + "\n")
    return folder / "list.csv"


CSV_RUN = ["--config", TINY, "--steps", "2", "--set", "data.source=csv", "--set", "data.augment=0",
           "--set", "train.val_every=0", "--set", "output.tensorboard=0"]


def test_labels_from_the_manifest(tmp_path):
    rows = [("val" if i % 4 == 0 else "train", {"label": i % 3}) for i in range(12)]
    csv = write_labelled_volumes(tmp_path / "data", rows)
    p = run("train", *CSV_RUN, "--set", "data.csv=%s" % csv, "--out", tmp_path / "run", timeout=300)
    assert "labels (classification, 9 training files): samples per class: 0: 3 1: 3 2: 3" in p.stdout, p.stdout
    assert [m for m in metrics(tmp_path / "run") if "val_accuracy" in m]
    rows = [("val" if i % 4 == 0 else "train", {"time": 1.5 + i, "event": i % 2}) for i in range(12)]
    csv = write_labelled_volumes(tmp_path / "surv", rows)
    p = run("train", *CSV_RUN, "--set", "data.csv=%s" % csv, "--set", "model.task=survival",
            "--set", "model.num_classes=1", "--out", tmp_path / "run2", timeout=300)
    assert "labels (survival, 9 training files): 6 events, 3 censored" in p.stdout, p.stdout


@pytest.mark.parametrize("column, value, task, words", [
    ("label", "", "classification", 'column "label" is "", not a finite number'),
    ("label", "two", "classification", 'column "label" is "two", not a finite number'),
    ("label", "3", "classification", "a class index 0..2 is expected (model.num_classes 3)"),
    ("label", "1.5", "classification", "a class index 0..2 is expected"),
    ("event", "2", "survival", 'column "event" is "2": the event is 1 (observed) or 0 (censored)'),
    ("time", "-1", "survival", "a survival time is not negative"),
])
def test_bad_labels_are_one_line_and_the_fixed_rerun_works(tmp_path, column, value, task, words):
    good = {"label": 1} if task == "classification" else {"time": 2.5, "event": 1}
    rows = [("val" if i % 4 == 0 else "train", dict(good)) for i in range(8)]
    rows[5][1][column] = value
    csv = write_labelled_volumes(tmp_path / "data", rows)
    head = ["--set", "model.task=%s" % task, "--set", "model.num_classes=%d" % (3 if task == "classification" else 1)]
    out = tmp_path / "run"
    p = run("train", *CSV_RUN, *head, "--set", "data.csv=%s" % csv, "--out", out, check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and words in lines[0] and "list.csv:7:" in lines[0], p.stderr
    assert not out.exists()
    rows[5][1][column] = good[column]
    write_labelled_volumes(tmp_path / "data", rows)
    run("train", *CSV_RUN, *head, "--set", "data.csv=%s" % csv, "--out", out, timeout=300)


def test_a_missing_label_column_is_named(tmp_path):
    csv = write_labelled_volumes(tmp_path / "data", [("train", {"grade": 1})] * 3 + [("val", {"grade": 0})])
    p = run("train", *CSV_RUN, "--set", "data.csv=%s" % csv, "--out", tmp_path / "run", check=False)
    assert p.returncode == 2 and 'no label column "label" in the header row' in p.stderr, p.stderr
    p = run("train", *CSV_RUN, "--set", "data.csv=%s" % csv, "--set", "data.label_columns=grade", "--out",
            tmp_path / "run", timeout=300)


# ---- densenet (issue 39): the other head family through the same trainer ---------------------------------------

CXR = "configs/test/cxr-tiny.json"


def test_densenet_sync_batchnorm_on_two_ranks_equals_one_rank(tmp_path):
    """DenseNet121 (2-D, chest films) with SyncBatchNorm on 2 ranks, each half of the batch, trains as one rank with
    the whole batch: step 1's gradients, norms and running statistics, and 3 steps' losses, within the spread one ulp
    on every initial weight makes."""
    args = ["--config", CXR, "--steps", "3", "--set", "model.sync_bn=1", "--set", "train.global_batch=8",
            "--set", "train.ckpt_every=1", "--set", "train.adam_eps=1e-3", *QUIET]
    one, two = tmp_path / "one", tmp_path / "two"
    run("train", "--out", one, *args, timeout=300, env=dumping(one))
    mpi(2, "train", "--out", two, *args, env=dumping(two))
    err = compare(two, one, 3)
    print("\ndensenet SyncBatchNorm on 2 ranks vs one rank: %s" % err)
    assert_within_spread(err, nudged_spread(tmp_path, one, args, 3),
                         ("gradient", "grad_norm_1", "running", "loss", "grad_norm"))


def test_densenet_resume_is_exact(tmp_path):
    """With MONAI's dropout_prob inside the dense layers too: the keyed masks redraw the same values on resume."""
    full, half = tmp_path / "full", tmp_path / "half"
    common = ["--config", CXR, "--steps", "6", "--set", "train.batch_size=4", "--set", "train.ckpt_every=3",
              "--set", "model.dropout_prob=0.2", *QUIET]
    run("train", "--out", full, *common, timeout=300)
    run("train", "--out", half, "--resume", full / "checkpoints" / "step_3.ckpt", *common, timeout=300)
    assert (full / "checkpoints" / "step_6.ckpt").read_bytes() == (half / "checkpoints" / "step_6.ckpt").read_bytes()


def test_densenet_dropout_prob_drops_in_training_only(tmp_path):
    """model.dropout_prob changes the training forward (outputs of step 0 from the same weights) and nothing of the
    evaluation forward: the same weights give the same validation figures at step 0."""
    def probe(name, p):
        prefix = tmp_path / name
        run("probe", "--config", CXR, "--out", prefix, "--device", "cpu", "--set", "train.batch_size=4",
            "--set", "model.dropout_prob=%g" % p, env=dict(os.environ, VX_PROBE_STEPS="1"))
        meta = json.loads((tmp_path / (name + ".json")).read_text())
        data = np.fromfile(tmp_path / (name + ".bin"), dtype=np.float32)
        return meta, data
    m0, d0 = probe("plain", 0)
    m1, d1 = probe("dropped", 0.3)
    weights = slice(m0["param_values"], m0["param_values"] + m0["param_count"])
    assert np.array_equal(d0[weights], d1[weights])
    out = slice(m0["steps"][0]["outputs"], m0["steps"][0]["outputs"] + 4 * m0["outputs_per_sample"])
    assert not np.array_equal(d0[out], d1[out])
    vals = []
    for p in (0, 0.3):
        o = tmp_path / ("val%g" % p)
        run("train", "--config", CXR, "--out", o, "--steps", "1", "--set", "model.dropout_prob=%g" % p,
            "--set", "train.val_every=1", *QUIET, "--set", "train.val_samples=16", timeout=300)
        vals.append([m for m in metrics(o) if "val_loss" in m][0])
    assert vals[0]["step"] == 0 and vals[0]["val_loss"] == vals[1]["val_loss"], vals


def test_cxr_tiny_learns_the_phantom_findings(tmp_path):
    """configs/test/cxr-tiny.json as shipped: a narrow DenseNet121 on chest-film phantoms learns all four findings
    (validation AUROC from about 0.5 before training to above 0.85 on average and above 0.7 for each at the end).

    The nodule is the hard finding: on 256 validation films it ends at 0.79 (im2col convolutions) and 0.83 (oneDNN's)
    where the other three end at 0.93-1.0, and on the config's own 64 films the estimate moved from 0.75 to 0.89 with
    the convolution paths the timing picked (VX_CONV_CPU; a run beside another test's picked a mix and read 0.747). So
    this validates on 256 films (the estimate's spread about a third of 64's) against a bar with room below 0.79."""
    out = tmp_path / "run"
    run("train", "--config", CXR, "--device", "cpu", "--out", out, "--set", "output.tensorboard=0",
        "--set", "train.val_samples=256", timeout=300)
    vals = [m for m in metrics(out) if "val_auroc" in m]
    first, last = vals[0], vals[-1]
    assert first["step"] == 0 and first["val_auroc"] < 0.7, first
    per = [last["val_auroc_label_%d" % j] for j in range(4)]
    print("\ncxr-tiny: AUROC %.3f -> %.3f, per finding %s" % (first["val_auroc"], last["val_auroc"], per))
    assert last["val_auroc"] > 0.85 and min(per) > 0.7, (last["val_auroc"], per)
