"""Hostile input, each case once a reproduced failure: checkpoint header fields with a valid CRC and nonsense values,
resume at another batch size (checked by sample index), a refused run that must leave the run directory as it was,
memory plans beyond the machine, values that pass a double range check but not a float32 one, lenient parsing,
and the exit codes and leftovers of failing writes and paths in the way."""
import json
import os
import resource
import signal
import struct
import subprocess
import time
import zlib

import pytest

from conftest import ROOT, VOXSCALE, metrics, run

TINY = "configs/test/tiny.json"
# CkptHeader (src/ckpt/ckpt.h): magic, version, header_bytes, param_count, fingerprint, step, next_sample, seed,
# world_size, loss_ema
HEADER = struct.Struct("<8sIIQQqqqqd")
FIELDS = ("magic", "version", "header_bytes", "param_count", "model_fingerprint", "step", "next_sample", "seed",
          "world_size", "loss_ema")


def assert_one_line(p, code, *needles):
    assert p.returncode == code, (p.returncode, p.stdout[-2000:], p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def snapshot(directory):
    """Every file under directory with its bytes: what a refused run must leave unchanged."""
    out = {}
    for base, _, files in os.walk(directory):
        for f in files:
            path = os.path.join(base, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, directory)] = fh.read()
    return out


def header(data):
    return dict(zip(FIELDS, HEADER.unpack_from(data)))


def with_header(data, **fields):
    """The checkpoint with header fields replaced and its CRC recomputed: only the range checks can refuse it."""
    h = header(data)
    h.update(fields)
    body = HEADER.pack(*(h[f] for f in FIELDS)) + data[HEADER.size:-4]
    return body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt") / "run"
    run("train", "--config", TINY, "--steps", "2", "--out", out)
    data = (out / "checkpoints" / "step_2.ckpt").read_bytes()
    assert header(data)["step"] == 2 and header(data)["next_sample"] == 4  # 2 steps of batch 2
    return data


@pytest.mark.parametrize("fields,needles", [
    ({"next_sample": -7}, ["data position (sample -7)"]),         # was a heap overflow in the loader, then a hang
    ({"next_sample": 2 ** 62}, ["data position"]),
    ({"next_sample": 1}, ["data position (sample 1) cannot follow 2 steps"]),
    ({"step": -5}, ["step -5 is outside"]),                        # trained "step -3"
    ({"step": 2 ** 62}, ["outside 0..1e9"]),                       # exited 0 having done nothing
    ({"step": 4}, ["at step 4, train.steps is 4", "--steps"]),     # nothing left to train
    ({"header_bytes": 64}, ["header says it is 64 bytes"]),        # said "version 1 is not supported (expects 1)"
    ({"version": 9}, ["version 9 is not supported"]),
    ({"world_size": 0}, ["0 ranks"]),
    ({"world_size": -3}, ["-3 ranks"]),
    ({"loss_ema": float("nan")}, ["running loss is nan"]),
    ({"param_count": 5}, ["truncated or corrupted"]),
    ({"seed": 8}, ["seed 8", "--seed 8"]),
    ({"model_fingerprint": 1}, ["different model"]),
])
def test_checkpoint_header_fields_are_range_checked(tmp_path, tiny_checkpoint, fields, needles):
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(with_header(tiny_checkpoint, **fields))
    out = tmp_path / "r"
    p = run("train", "--config", TINY, "--steps", "4", "--out", out, "--resume", bad, check=False, timeout=60)
    assert_one_line(p, 2, *needles)
    assert not out.exists(), "a refused resume created its run directory"


def test_a_checkpoint_larger_than_the_model_is_refused_by_size(tmp_path, tiny_checkpoint):
    bad = tmp_path / "big.ckpt"
    bad.write_bytes(tiny_checkpoint + b"\0" * 4096)
    p = run("train", "--config", TINY, "--steps", "4", "--out", tmp_path / "r", "--resume", bad, check=False)
    assert_one_line(p, 2, "larger than a checkpoint of this model")


def samples(run_dir):
    """samples.tsv rows as (step, micro, first, count)."""
    with open(os.path.join(run_dir, "samples.tsv")) as f:
        return [tuple(int(x) for x in line.split("\t")) for line in f if line.strip()]


@pytest.mark.parametrize("first,then", [
    ({"batch": 2, "accum": 1}, {"batch": 3, "accum": 1}),
    ({"batch": 4, "accum": 1}, {"batch": 3, "accum": 2}),
    ({"batch": 3, "accum": 2}, {"batch": 2, "accum": 1}),
])
def test_resume_at_another_batch_size_reads_every_sample_exactly_once(tmp_path, first, then):
    def args(shape):
        return ["--batch-size", shape["batch"], "--set", "train.grad_accum=%d" % shape["accum"],
                "--set", "output.sample_log=1", "--set", "train.val_samples=0", "--set", "output.tensorboard=0"]
    a, b = tmp_path / "a", tmp_path / "b"
    run("train", "--config", TINY, "--steps", "6", "--out", a, "--set", "train.ckpt_every=3", *args(first))
    ckpt = a / "checkpoints" / "step_3.ckpt"
    saved = header(ckpt.read_bytes())["next_sample"]
    assert saved == 3 * first["batch"] * first["accum"]
    run("train", "--config", TINY, "--steps", "9", "--out", b, "--resume", ckpt, *args(then))
    before = [r for r in samples(a) if r[0] <= 3]
    after = samples(b)
    assert after[0][:3] == (4, 0, saved), "the first batch after the resume must start at the saved position"
    assert all(r[3] == then["batch"] for r in after) and len(after) == 6 * then["accum"]
    seen = [i for (_, _, start, count) in before + after for i in range(start, start + count)]
    assert seen == list(range(len(seen))), "a sample was skipped or read twice"
    assert header((b / "checkpoints" / "step_9.ckpt").read_bytes())["next_sample"] == len(seen)


def test_resume_with_another_models_config_leaves_the_run_directory_alone(tmp_path):
    out = tmp_path / "run"
    run("train", "--config", TINY, "--steps", "2", "--out", out)
    before = snapshot(out)
    p = run("train", "--config", "configs/test/small.json", "--steps", "4", "--out", out,
            "--resume", out / "checkpoints" / "step_2.ckpt", check=False)
    # the run's config.json beside the checkpoint names the difference (issue 36), before the checkpoint's model check
    assert_one_line(p, 2, "differs from the run's config.json", "model.")
    assert snapshot(out) == before, "the refused run changed the run directory"
    # ... and the run can still be resumed with its own config, in its own directory
    p = run("train", "--config", TINY, "--steps", "3", "--out", out, "--resume", out / "checkpoints" / "step_2.ckpt")
    assert (out / "checkpoints" / "step_3.ckpt").exists()


def test_a_fresh_run_into_a_used_directory_is_refused(tmp_path):
    out = tmp_path / "run"
    run("train", "--config", TINY, "--steps", "1", "--out", out)
    before = snapshot(out)
    p = run("train", "--config", TINY, "--steps", "1", "--out", out, check=False)
    assert_one_line(p, 2, "already holds a run", "--resume")
    assert snapshot(out) == before


@pytest.mark.parametrize("tensorboard", [1, 0])
def test_a_busy_run_directory_is_refused(tmp_path, tensorboard):
    out = tmp_path / "run"
    tb = "output.tensorboard=%d" % tensorboard
    proc = subprocess.Popen([VOXSCALE, "train", "--config", "configs/test/small.json", "--steps", "100000",
                             "--out", str(out), "--set", "train.log_every=1", "--set", tb], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not (out / "metrics.jsonl").exists():
            time.sleep(0.1)
        config_before = (out / "config.json").read_bytes()
        p = run("train", "--config", TINY, "--steps", "1", "--out", out, "--set", tb, check=False)
        assert_one_line(p, 2, "in use by another voxscale run (pid %d)" % proc.pid)
        assert (out / "config.json").read_bytes() == config_before
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert proc.returncode == 130


def test_memory_beyond_the_machine_is_refused_before_anything_is_written(tmp_path):
    # the validation set was outside the plan: 1e6 held-out volumes asked for 131 GB
    out = tmp_path / "val"
    p = run("train", "--config", "configs/default.json", "--set", "train.val_samples=1000000", "--out", out,
            "--device", "cpu", check=False)
    assert_one_line(p, 5, "GiB of host memory", "held-out volumes", "lower train.val_samples")
    assert not out.exists()
    # an explicit batch size was not checked at all
    out = tmp_path / "batch"
    p = run("train", "--config", "configs/ae3d-64.json", "--batch-size", "256", "--out", out, "--device", "cpu",
            check=False)
    assert_one_line(p, 5, "GiB of host memory", "lower train.batch_size")
    assert not out.exists()


def test_config_and_checkpoint_reads_are_bounded(tmp_path):
    p = run("train", "--config", "/dev/zero", "--out", tmp_path / "r", check=False, timeout=30)
    assert_one_line(p, 2, "/dev/zero", "larger than 1024 KiB")
    p = run("train", "--config", TINY, "--resume", "/dev/zero", "--out", tmp_path / "r", check=False, timeout=30)
    assert_one_line(p, 2, "/dev/zero", "larger than a checkpoint")
    p = run("train", "--config", "configs", "--out", tmp_path / "r", check=False)
    assert_one_line(p, 2, "configs", "Is a directory")


@pytest.mark.parametrize("args,needles", [
    (["--set", "train.beta2=0.999999999"], ["train.beta2", "0.9999999"]),  # 1.0 in float32: every weight NaN
    (["--set", "train.beta1=1"], ["train.beta1"]),
    (["--threads", "4096"], ["train.threads = 4096 exceeds"]),             # a 0.05 s step took 36 s
    (["--set", "train.lr=5", "--set", "train.weight_decay=0.5"], ["lr * train.weight_decay"]),
])
def test_values_that_would_break_training_are_refused(tmp_path, args, needles):
    out = tmp_path / "r"
    p = run("train", "--config", TINY, "--out", out, *args, check=False)
    assert_one_line(p, 2, *needles)
    assert not out.exists()


def test_a_diverging_run_stops_with_exit_4_and_saves_nothing_non_finite(tmp_path):
    out = tmp_path / "r"
    # lr 10 without clipping and a log-variance clamp at 100: the KL term's exp(logvar) overflows within steps
    p = run("train", "--config", TINY, "--steps", "40", "--out", out, "--lr", "10", "--set", "train.grad_clip=0",
            "--set", "train.weight_decay=0", "--set", "train.warmup_steps=0", "--set", "model.logvar_max=100",
            "--set", "train.ckpt_every=1", "--set", "train.log_every=1", check=False)
    assert_one_line(p, 4, "training diverged at step", "lower train.lr")
    step = int(p.stderr.split("training diverged at step ")[1].split(":")[0])
    ckpts = sorted(int(f[5:-5]) for f in os.listdir(out / "checkpoints") if f.startswith("step_"))  # (and best.ckpt)
    assert ckpts == list(range(1, step)), (step, ckpts)  # every good step kept, the diverged one not written
    assert all(m.get("loss", 0) == m.get("loss", 0) for m in metrics(out))  # no NaN was logged


@pytest.mark.parametrize("text,needles", [
    ('{"train": {"steps": 3}} // trailing comment', ["text after the end of the JSON object"]),
    ('{"train": {"steps": 3, "steps": 4}}', ["train.steps is given twice"]),
    ('{"model": {}, "model": {}}', ["model is given twice"]),
    ('{"train": {"st\\u001b[31meps": 3}}', ["unknown key", "\\x1B[31m"]),
    ('{"train": {"steps": 3}}\0{"x": 1}', ["NUL byte"]),
])
def test_config_parsing_is_strict(tmp_path, text, needles):
    cfg = tmp_path / "c.json"
    cfg.write_bytes(text.encode())
    p = run("train", "--config", cfg, "--out", tmp_path / "r", check=False)
    assert_one_line(p, 2, *needles)
    assert "\x1b" not in p.stderr, "an escape sequence from the input reached the terminal"


@pytest.mark.parametrize("value", ["5abc", "0x10", "1e1x", "3 4", ""])
def test_flag_values_must_be_whole_numbers(tmp_path, value):
    p = run("train", "--config", TINY, "--steps", value, "--out", tmp_path / "r", check=False)
    assert_one_line(p, 2, "--steps", "train.steps")


def test_untrusted_bytes_are_escaped_in_messages(tmp_path):
    name = "conf\x1b]0;pwned\x07\x9b.json"
    p = run("train", "--config", name, "--out", tmp_path / "r", check=False)
    assert p.returncode == 2
    assert "\x1b" not in p.stderr and "\x07" not in p.stderr and "\\x1B]0;pwned\\x07" in p.stderr, p.stderr


def test_a_write_failing_while_checkpointing_exits_6_and_leaves_no_tmp(tmp_path):
    """The checkpoint's write fails part way, as on a full disk: a file-size limit below its size (EFBIG; SIGXFSZ
    ignored, so write() returns the error). A link to /dev/full at the writer's fixed temporary name (step_2.ckpt.tmp)
    did this before; the temporary's name is now drawn and created exclusively (issue 34: the fixed name consumed a
    user's file of that name), so nothing placed in advance is written through."""
    out = tmp_path / "r"

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))  # the checkpoint is 133 KiB, the rest less

    p = subprocess.run([VOXSCALE, "train", "--config", TINY, "--steps", "2", "--out", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, preexec_fn=small_files)
    # (the first checkpoint written is best.ckpt where the last step validates, else step_2.ckpt)
    assert_one_line(p, 6, "/checkpoints/", ".ckpt", "File too large", "ulimit -f")
    assert os.listdir(out / "checkpoints") == [], "the failed write left its temporary behind"


def test_a_directory_in_the_way_of_a_checkpoint_exits_6_and_leaves_no_tmp(tmp_path):
    out = tmp_path / "r"
    (out / "checkpoints" / "step_2.ckpt").mkdir(parents=True)
    p = run("train", "--config", TINY, "--steps", "2", "--out", out, check=False)
    assert_one_line(p, 6, "step_2.ckpt", "Is a directory", "in the way")
    assert not (out / "checkpoints" / "step_2.ckpt.tmp").exists()


def test_a_file_in_the_way_of_the_run_directory_exits_6(tmp_path):
    (tmp_path / "file").write_text("x")
    p = run("train", "--config", TINY, "--steps", "1", "--out", tmp_path / "file" / "run", check=False)
    assert_one_line(p, 6, "Not a directory", "in the way")


def test_default_run_directories_of_the_same_second_do_not_collide(tmp_path):
    """Two runs of one config started in the same second get two directories (the name is taken by mkdir)."""
    env = dict(os.environ)
    procs = [subprocess.Popen([VOXSCALE, "train", "--config", os.path.join(ROOT, TINY), "--steps", "1",
                               "--set", "output.tensorboard=0"], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    dirs = sorted(os.listdir(tmp_path / "runs"))
    assert len(dirs) == 3 and all(d.startswith("tiny-") for d in dirs), dirs
    for d in dirs:
        assert json.loads((tmp_path / "runs" / d / "config.json").read_text())["train"]["steps"] == 1
