"""Nothing is overwritten (issue 34): a command writes only files it creates in this invocation, or files of its own
run in a directory it locked; an existing file it would write is refused before anything is written (exit 2, one line
naming it) unless --overwrite says so, and an input of the command is never written. Each case once a reproduced
loss:
- a fresh run into a finished ZeRO run's folder took it over (the guard counted only *.ckpt files), and without
  config.json wrote beside its shards; a refused foreign folder kept the refused run's lock file;
- a refused resume (dist.offload_optimizer without ZeRO) rewrote the run's config.json and added an event file;
- a resume into the crashed run's own folder logged the steps after its checkpoint twice in metrics.jsonl;
- a run stopped by SIGTERM wrote its checkpoint into a folder deleted and re-created (and locked) by a new run;
- the atomic writer's fixed temporary name (path.tmp) consumed a user's file of that name;
- export --out replaced any file without a word: another file, the run's config.json, its own --ckpt;
- predict overwrote existing <name>_recon/_mu/_sample.nii.gz, an input volume of --data in the same folder, and two
  predicts into one --out both wrote (no lock);
- ckpt consolidate and bench's results: refused over an existing file, replaced with --overwrite, never over an
  input."""
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from conftest import ROOT, VOXSCALE, mpi, needs_mpirun, run

TINY = "configs/test/tiny.json"
QUIET = ["--threads", "1", "--set", "output.tensorboard=0"]


def tree(directory):
    """Every entry under directory (files with their bytes, directories as None): what a refused command must leave
    exactly as it was."""
    out = {}
    for base, dirs, files in os.walk(directory):
        for d in dirs:
            out[os.path.relpath(os.path.join(base, d), directory)] = None
        for f in files:
            path = os.path.join(base, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, directory)] = fh.read()
    return out


def refused(p, *needles):
    """exit 2 and one line of voxscale's holding every needle (under mpirun, every rank's line that there is, less
    those of a rank mpirun ended after the refused one exited: issue 34, each says so)."""
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    lines = [l for l in p.stderr.splitlines() if l.startswith("voxscale") and "ended by mpirun (SIGTERM)" not in l]
    assert lines and (len(lines) == len(p.stderr.strip().splitlines()) or "mpirun" in p.args), p.stderr
    for line in lines:
        for n in needles:
            assert n in line, (n, line)


# ---- train: the run directory ------------------------------------------------------------------------------------

@needs_mpirun
def test_a_finished_zero_run_is_neither_taken_over_nor_written_beside(tmp_path):
    out = tmp_path / "R"
    mpi(2, "train", "--config", TINY, "--steps", "4", "--zero", "2", "--out", out, *QUIET)
    assert (out / "checkpoints" / "step_4.zero" / "manifest.json").exists()
    before = tree(out)
    # it said "ended before its first checkpoint", replaced config, metrics and events, and overwrote the shards
    p = mpi(2, "train", "--config", TINY, "--steps", "4", "--zero", "2", "--out", out, "--seed", "5", *QUIET,
            check=False)
    refused(p, "already holds a run", "--resume %s/checkpoints/step_4.zero" % out)
    assert tree(out) == before
    # without config.json it "wrote beside them" and overwrote the shards
    (out / "config.json").unlink()
    before = tree(out)
    p = mpi(2, "train", "--config", TINY, "--steps", "4", "--zero", "2", "--out", out, "--seed", "5", *QUIET,
            check=False)
    refused(p, "without its config.json", "%d checkpoint(s)" % len(os.listdir(out / "checkpoints")))
    assert tree(out) == before


def test_a_refused_foreign_folder_keeps_no_lock_file_of_ours(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    run("train", "--config", TINY, "--steps", "2", "--out", a, *QUIET)
    shutil.copytree(a / "checkpoints", b / "checkpoints")  # checkpoints collected in a folder, no config.json
    before = tree(b)
    p = run("train", "--config", TINY, "--steps", "2", "--out", b, *QUIET, check=False)
    refused(p, "without its config.json")
    assert tree(b) == before, "the refused run left its lock file"


def test_a_refused_resume_changes_nothing_in_the_run(tmp_path):
    out = tmp_path / "R"
    run("train", "--config", TINY, "--steps", "2", "--out", out)
    before = tree(out)
    # ZeRO off: the offload check sat after the run directory was taken, config.json and an event file written
    p = run("train", "--config", TINY, "--steps", "4", "--out", out, "--resume", out / "checkpoints" / "step_2.ckpt",
            "--set", "dist.offload_optimizer=cpu", check=False)
    refused(p, "dist.offload_optimizer", "dist.zero 1 or 2")
    assert tree(out) == before


def test_a_resume_after_a_crash_logs_each_step_once(tmp_path):
    out = tmp_path / "R"
    args = ["--config", TINY, "--steps", "6", "--out", out, "--set", "train.log_every=1", "--set",
            "train.ckpt_every=3", "--set", "output.sample_log=1", *QUIET]
    run("train", *args)
    # the crash: killed while writing a row after its last checkpoint (step 3's, as if step_6.ckpt were never made)
    (out / "checkpoints" / "step_6.ckpt").unlink()
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 7, "loss": 0.1')
    p = run("train", *args, "--resume", out / "checkpoints" / "step_3.ckpt")
    lines = (out / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.endswith("}") and line.count("{") == 1]
    # (it was [1, .., 6, 5, 6]: step 4's row joined the torn one)
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4, 5, 6], rows
    assert len(rows) == len(lines), "a torn row is left: " + repr(lines)
    assert [r["step"] for r in rows if "val_l1" in r] == [0, 6], rows
    with open(out / "samples.tsv") as f:
        assert [int(line.split("\t")[0]) for line in f] == [1, 2, 3, 4, 5, 6]
    assert "after step 3 (the checkpoint resumed) removed" in p.stdout, p.stdout


def logged_a_step(run_dir):
    try:
        return '"loss"' in (run_dir / "metrics.jsonl").read_text()
    except FileNotFoundError:
        return False


def test_a_stopped_run_writes_nothing_into_its_directory_once_another_run_has_it(tmp_path):
    out = tmp_path / "R"
    first = subprocess.Popen([VOXSCALE, "train", "--config", "configs/test/small.json", "--steps", "100000", "--out",
                              str(out), "--set", "train.log_every=1", "--set", "train.ckpt_every=100000", *QUIET],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # (after its first step: a SIGTERM while it measures its convolutions at step 0 can corrupt the heap, a bug
        # of its own that this test is not about)
        deadline = time.time() + 60
        while time.time() < deadline and not logged_a_step(out):
            time.sleep(0.1)
        assert logged_a_step(out)
        shutil.rmtree(out)  # the folder deleted by hand while the run goes on, and a new run started there
        run("train", "--config", TINY, "--steps", "1", "--out", out, *QUIET)
        before = tree(out)
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    # it wrote checkpoints/step_N.ckpt among the new run's files and exited 130
    assert first.returncode == 6, (first.returncode, err[-2000:])
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "is no longer this run's" in lines[0] and "is not written" in lines[0], err
    assert tree(out) == before


def test_a_users_file_named_like_the_temporary_is_left_alone(tmp_path):
    out = tmp_path / "R"
    (out / "checkpoints").mkdir(parents=True)
    mine = out / "checkpoints" / "step_2.ckpt.tmp"
    mine.write_bytes(b"mine")
    run("train", "--config", TINY, "--steps", "2", "--out", out, *QUIET)
    assert mine.read_bytes() == b"mine"  # it was opened, truncated and renamed into the checkpoint
    assert (out / "checkpoints" / "step_2.ckpt").stat().st_size > 1000
    # (and best.ckpt: the last step validates, issue 35)
    assert not [f for f in os.listdir(out / "checkpoints") if f not in ("step_2.ckpt", "step_2.ckpt.tmp", "best.ckpt")]


# ---- export ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny") / "run"
    run("train", "--config", TINY, "--steps", "2", "--out", out, *QUIET)
    return out


def test_export_writes_no_existing_file_and_never_its_inputs(tiny_run, tmp_path):
    ck, config = tiny_run / "checkpoints" / "step_2.ckpt", tiny_run / "config.json"
    other = tmp_path / "other.safetensors"
    other.write_bytes(b"someone's file")
    keep = {ck: ck.read_bytes(), config: config.read_bytes(), other: other.read_bytes()}
    for target in (other, config, ck):
        p = run("export", "--ckpt", ck, "--out", target, check=False)
        refused(p, "export --out", str(target), "already exists", "--overwrite")
    # --overwrite replaces a file, but never the checkpoint or the config the export reads
    for target, what in ((config, "the run's config.json"), (ck, "--ckpt")):
        p = run("export", "--ckpt", ck, "--out", target, "--overwrite", check=False)
        refused(p, str(target), "this command's input (%s)" % what)
    assert all(path.read_bytes() == data for path, data in keep.items())
    run("export", "--ckpt", ck, "--out", other, "--overwrite")
    assert other.read_bytes()[8:9] == b"{"  # a safetensors header now
    run("export", "--ckpt", ck, "--out", tmp_path / "new.safetensors")
    assert sorted(os.listdir(tmp_path)) == ["new.safetensors", "other.safetensors"]  # no temporary left


# ---- predict -----------------------------------------------------------------------------------------------------

def write_volume(path, seed):
    import nibabel as nib
    a = (np.random.default_rng(seed).normal(size=(8, 8, 8)) * 40 + 100).astype(np.float32)
    nib.save(nib.Nifti1Image(a, np.eye(4)), str(path))


@pytest.fixture()
def volumes(tmp_path):
    pytest.importorskip("nibabel")
    vols = tmp_path / "vols"
    vols.mkdir()
    for i, name in enumerate(("a", "b")):
        write_volume(vols / ("%s.nii.gz" % name), i)
    return vols


def predict(ck, data, out, *extra, check=True):
    return run("predict", "--ckpt", ck, "--data", data, "--out", out, "--device", "cpu", *extra, check=check)


def test_predict_writes_no_existing_output(tiny_run, volumes, tmp_path):
    ck, out = tiny_run / "checkpoints" / "step_2.ckpt", tmp_path / "out"
    out.mkdir()
    (out / "b_mu.nii.gz").write_bytes(b"mine")
    (out / "a_recon.nii.gz.tmp").write_bytes(b"mine too")  # the atomic writer's fixed temporary name took it
    before = tree(out)
    p = predict(ck, volumes, out, check=False)
    refused(p, "--out %s already holds b_mu.nii.gz" % out, "--overwrite")
    assert tree(out) == before, "the refused predict wrote or left something"
    predict(ck, volumes, out, "--overwrite")
    assert (out / "b_mu.nii.gz").read_bytes()[:2] == b"\x1f\x8b"  # replaced by a NIfTI, as asked
    assert (out / "a_recon.nii.gz.tmp").read_bytes() == b"mine too"
    assert sorted(os.listdir(out)) == [".voxscale.lock", "a_mu.nii.gz", "a_recon.nii.gz", "a_recon.nii.gz.tmp",
                                       "b_mu.nii.gz", "b_recon.nii.gz", "predictions.csv"]


def test_predict_into_its_input_folder_never_writes_an_input(tiny_run, volumes):
    ck = tiny_run / "checkpoints" / "step_2.ckpt"
    write_volume(volumes / "a_mu.nii.gz", 7)  # an input whose name is a's latent's: it was replaced by it
    before = tree(volumes)
    for extra in ([], ["--overwrite"]):
        p = predict(ck, volumes, volumes, *extra, check=False)
        refused(p, "a_mu.nii.gz")
        assert tree(volumes) == before
    assert "this command's input (--data)" in p.stderr, p.stderr


def test_two_predicts_into_one_out_do_not_both_write(tiny_run, volumes, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".voxscale.lock", "w") as held:  # another predict, running
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        p = predict(tiny_run / "checkpoints" / "step_2.ckpt", volumes, out, check=False)
    refused(p, "in use by another voxscale run (pid 4242)")
    assert os.listdir(out) == [".voxscale.lock"]


def test_a_failed_predict_takes_its_outputs_back(tiny_run, volumes, tmp_path):
    ck, out = tiny_run / "checkpoints" / "step_2.ckpt", tmp_path / "out"
    import nibabel as nib
    nan = np.ones((8, 8, 8), dtype=np.float32)
    nan[1, 2, 3] = np.nan
    nib.save(nib.Nifti1Image(nan, np.eye(4)), str(volumes / "z.nii.gz"))  # found only when decoded, after a and b
    p = predict(ck, volumes, out, "--batch-size", "1", check=False)
    refused(p, "z.nii.gz", "not finite")
    assert os.listdir(out) == [".voxscale.lock"], "the outputs of a and b stayed, and blocked the rerun"
    predict(ck, volumes, out, "--set", "data.nonfinite=zero")
    assert len(os.listdir(out)) == 8


# ---- ckpt consolidate and bench's results ------------------------------------------------------------------------

@needs_mpirun
def test_consolidate_overwrites_only_when_told_and_never_an_input(tmp_path):
    out = tmp_path / "R"
    mpi(2, "train", "--config", TINY, "--steps", "2", "--zero", "2", "--out", out, *QUIET)
    sharded, config = out / "checkpoints" / "step_2.zero", out / "config.json"
    keep = tmp_path / "keep.ckpt"
    keep.write_bytes(b"someone's file")
    p = run("ckpt", "consolidate", sharded, "--out", keep, check=False)
    refused(p, str(keep), "already exists", "--overwrite")
    for target, what in ((config, "the run's config.json"), (sharded / "rank1-of-2.shard", "the sharded checkpoint")):
        before = target.read_bytes()
        p = run("ckpt", "consolidate", sharded, "--out", target, "--overwrite", check=False)
        refused(p, str(target), "this command's input (%s)" % what)
        assert target.read_bytes() == before
    run("ckpt", "consolidate", sharded, "--out", keep, "--overwrite")
    assert keep.read_bytes()[:8] != b"someone'"


def test_bench_results_are_not_replaced_without_overwrite(tmp_path):
    args = ["bench", "step", "--config", TINY, "--iters", "1", "--warmup", "0", "--device", "cpu",
            "--results", tmp_path]
    run(*args)
    [device] = os.listdir(tmp_path)
    before = tree(tmp_path)
    p = run(*args, check=False)
    refused(p, "step_tiny.json", "already exists", "--overwrite")
    assert tree(tmp_path) == before
    run(*args, "--overwrite")
    assert sorted(os.listdir(tmp_path / device)) == ["step_tiny.json", "step_tiny.md"]
