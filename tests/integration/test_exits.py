"""Exits and messages (issue 34): every ending has its README exit code and a voxscale line that names the cause.

- A rank SIGKILLed under mpirun: mpirun SIGTERMs the others about a second later and only mpirun spoke (exit 137, no
  voxscale line); now each rank it ends says so in one line naming itself and exits 3 (mpirun's own code stays the
  dead rank's).
- A failed CPU allocation exited 1 from backend_cpu.c ("error at ...:28"), where the README says 5: now exit 5 with
  the bytes asked for and the plan's figures (an address-space limit below the planned arena makes it fail).
- predict and export named train's --resume in their checkpoint errors and a missing --ckpt as a missing config.json;
  a checkpoint of another model said "different model (11321 parameters) than the config (11321)", now the key or
  parameter that differs; consolidate said "check the path given to --config" when none was given; predict of a
  vit3d exited 1 as an internal error; a 20,000-character path filled the line's 2 KiB and cut the reason off.
"""
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import time

import pytest

from conftest import MPIRUN, ROOT, VOXSCALE, needs_mpirun, rank_pids, run


@needs_mpirun
def test_a_rank_killed_under_mpirun_leaves_a_voxscale_line_from_the_others(tmp_path):
    out = tmp_path / "run"
    p = subprocess.Popen([*MPIRUN, "-np", "2", VOXSCALE, "train", "--config", "configs/test/tiny.json", "--steps",
                          "100000", "--out", str(out), "--device", "cpu", "--set", "output.tensorboard=0",
                          "--set", "train.log_every=1", "--set", "train.val_every=0"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim, deadline = None, time.time() + 120
    while victim is None and time.time() < deadline:  # rank 1, once the run has logged a step
        time.sleep(0.3)
        if not (out / "metrics.jsonl").exists() or "loss" not in (out / "metrics.jsonl").read_text():
            continue
        # this run's rank 1 only (rank_pids matches its --out folder): another test's on a pytest-xdist worker, or
        # a user's, is not ours to kill
        victim = next(iter(rank_pids(str(out), "OMPI_COMM_WORLD_RANK", 1)), None)
    assert victim, "rank 1 never started"
    os.kill(victim, signal.SIGKILL)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 137, (p.returncode, err[-2000:])  # mpirun's: the SIGKILLed rank's
    assert re.search(r"^voxscale: rank 0/2 \(pid \d+ on \S+\): ended by mpirun \(SIGTERM\): a peer rank exited or "
                     r"the job is being stopped; exit 3$", err, re.M), err[-3000:]


def test_a_failed_allocation_is_exit_5_with_the_plans_figures(tmp_path):
    def limit():  # 1 GiB of address space: the binary and its libraries fit, the planned 1.14 GiB arena does not
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    p = subprocess.run([VOXSCALE, "train", "--config", "configs/test/tiny.json", "--steps", "1", "--out",
                        str(tmp_path / "run"), "--device", "cpu", "--set", "output.tensorboard=0",
                        "--set", "model.input_size=[64,64,64]", "--set", "train.batch_size=16"], cwd=ROOT,
                       capture_output=True, text=True, preexec_fn=limit, timeout=300)
    assert p.returncode == 5, (p.returncode, p.stderr)
    assert re.search(r"^voxscale: out of host memory: the CPU backend could not allocate 1\.14 GiB \(\d+ bytes\); "
                     r"the plan: cpu arena 1172\.4 MiB \+ [0-9.]+ MiB parameters, gradients and AdamW state = "
                     r"[0-9.]+ MiB at batch 16; lower train.batch_size", p.stderr), p.stderr


# ---- messages: each command names its own flags and the real cause ----------------------------------------------

TINY = "configs/test/tiny.json"
CPU = ["--device", "cpu", "--set", "output.tensorboard=0", "--threads", "1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny ae3d run (step_2.ckpt), the same as ZeRO-2 (step_2.zero), a vit3d run, and a volume folder."""
    import numpy as np
    import nibabel as nib
    d = tmp_path_factory.mktemp("messages")
    run("train", "--config", TINY, "--steps", 2, "--out", d / "ae", *CPU, "--set", "train.val_samples=0")
    run("train", "--config", TINY, "--steps", 2, "--out", d / "zero", "--zero", 2, *CPU, "--set",
        "train.val_samples=0")
    run("train", "--config", "configs/test/vit3d-tiny.json", "--steps", 1, "--out", d / "vit", *CPU, "--set",
        "train.val_samples=0")
    (d / "vols").mkdir()
    nib.save(nib.Nifti1Image(np.ones((16, 16, 16), np.float32), np.eye(4)), str(d / "vols" / "v.nii.gz"))
    cfg = json.loads(open(os.path.join(ROOT, TINY)).read())
    cfg["model"]["norm_groups"] = 4  # the same parameter count, another model
    (d / "groups4.json").write_text(json.dumps(cfg))
    return d


def refused(p, *words):
    lines = [l for l in p.stderr.splitlines() if l.startswith("voxscale")]
    assert p.returncode == 2 and len(lines) == 1, (p.returncode, p.stderr)
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_predict_and_export_name_their_own_flags(runs, tmp_path):
    p = run("predict", "--ckpt", tmp_path / "gone" / "step_1.ckpt", "--data", runs / "vols", "--out", tmp_path / "p",
            check=False)
    line = refused(p, "gone/step_1.ckpt: no such file; check the path given to --ckpt")
    assert "config.json" not in line  # (it said "no config.json of its run")
    bad = tmp_path / "r" / "checkpoints" / "step_2.ckpt"
    shutil.copytree(runs / "ae", tmp_path / "r")
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 1
    bad.write_bytes(bytes(data))
    for args in (["predict", "--ckpt", bad, "--data", runs / "vols", "--out", tmp_path / "p2", "--device", "cpu"],
                 ["export", "--ckpt", bad, "--out", tmp_path / "e.safetensors"]):
        line = refused(run(*args, check=False), "checksum mismatch", "give --ckpt another checkpoint")
        assert "--resume" not in line and "resume from" not in line, line


def test_another_model_is_named_by_the_key_or_parameter_that_differs(runs, tmp_path):
    p = run("export", "--ckpt", runs / "ae" / "checkpoints" / "step_2.ckpt", "--config", runs / "groups4.json",
            "--out", tmp_path / "e.safetensors", check=False)
    refused(p, "a checkpoint of another model than --config", "model.norm_groups is 2 in its run's config and 4",
            "drop --config")
    p = run("export", "--ckpt", runs / "ae" / "checkpoints" / "step_2.ckpt", "--config",
            "configs/test/resnet-tiny.json", "--out", tmp_path / "e2.safetensors", check=False)
    refused(p, 'its parameter 0 is "encoder.conv_in.weight" [4, 1, 3, 3, 3]', '"conv1.weight" [8, 1, 7, 7, 7]')
    p = run("ckpt", "consolidate", runs / "zero" / "checkpoints" / "step_2.zero", "--config", runs / "groups4.json",
            "--out", tmp_path / "c.ckpt", check=False)
    line = refused(p, "model.norm_groups is 2 in its run's config and 4")
    assert "(11321) than the config (11321)" not in line
    # consolidate without --config, its run's config.json absent: says so, and not "the path given to --config"
    lone = tmp_path / "lone" / "x.zero"
    shutil.copytree(runs / "zero" / "checkpoints" / "step_2.zero", lone)
    line = refused(run("ckpt", "consolidate", lone, check=False), "no config.json of its run at",
                   "give it with --config FILE")
    assert "path given to --config" not in line


def test_predict_of_a_family_it_writes_nothing_for_is_bad_input(runs, tmp_path):
    p = run("predict", "--ckpt", runs / "vit" / "checkpoints" / "step_1.ckpt", "--data", runs / "vols", "--out",
            tmp_path / "p", "--device", "cpu", check=False)
    refused(p, "predict: a vit3d model has nothing predict writes")  # (exit 1, "error at predict_family.c:204")


def test_a_long_path_is_shortened_in_the_middle_and_the_reason_kept(tmp_path):
    csv = tmp_path / "list.csv"
    csv.write_text("path,split\n%s.nii,train\nb.nii,val\n" % ("a" * 20000))
    p = run("train", "--config", TINY, "--steps", 1, "--out", tmp_path / "r", *CPU, "--set", "data.source=csv",
            "--set", "data.csv=%s" % csv, check=False)
    line = refused(p, "bytes left out)...", "File name too long; fix or remove it")  # (cut at 2 KiB, no reason)
    assert len(line) < 1000, len(line)
