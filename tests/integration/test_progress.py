"""Progress from the first step on, and a start header of a few lines (issue 36): the heartbeat before log_every's first
line, progress lines with rate and ETA while the data is decoded, a checkpoint written, a benchmark run and a sharded
checkpoint read, the full plan kept in the run folder (plan.txt) and printed with -v, and "no GPU found" said plainly.
VX_PROGRESS_S=0 makes every update a line (and 1000 none after the first), so nothing here depends on the clock."""
import json
import os
import re

import pytest

from conftest import run

TINY = ["--config", "configs/test/tiny.json"]
EVERY = dict(os.environ, VX_PROGRESS_S="0")
NEVER = dict(os.environ, VX_PROGRESS_S="1000")
HEARTBEAT = re.compile(r"^step +(\d+)/(\d+) \| loss [\d.]+ \| \d+ ms/step \| eta \S+ "
                       r"\(the full line every (\d+) steps\)$")
FULL = re.compile(r"^step +(\d+)/\d+ \| loss .* \| grad norm ")


def steps_of(pattern, out):
    return [int(m.group(1)) for m in map(pattern.match, out.splitlines()) if m]


def test_a_heartbeat_from_the_first_step_until_log_every_takes_over(tmp_path):
    p = run("train", *TINY, "--steps", "12", "--out", tmp_path / "r", "--set", "train.log_every=5", env=EVERY)
    print(p.stdout)  # (the heartbeat, as the captured output shows it)
    assert steps_of(HEARTBEAT, p.stdout) == [1, 2, 3, 4], p.stdout  # every step while due, none after step 5's line
    assert steps_of(FULL, p.stdout) == [5, 10, 12], p.stdout
    assert all(m.group(3) == "5" for m in map(HEARTBEAT.match, p.stdout.splitlines()) if m)


def test_the_heartbeat_after_the_first_step_then_only_when_its_interval_has_passed(tmp_path):
    p = run("train", *TINY, "--steps", "12", "--out", tmp_path / "r", "--set", "train.log_every=5", env=NEVER)
    assert steps_of(HEARTBEAT, p.stdout) == [1], p.stdout
    # a resumed run's first step is its own first: the heartbeat comes after it
    run("train", *TINY, "--steps", "12", "--out", tmp_path / "a", "--set", "train.ckpt_every=6", "--set",
        "train.log_every=100")
    q = run("train", "--resume", tmp_path / "a" / "checkpoints" / "step_6.ckpt", "--out", tmp_path / "b", env=NEVER)
    assert steps_of(HEARTBEAT, q.stdout) == [7], q.stdout


def header(out):
    """The lines a run prints before its first validation or step."""
    lines = out.splitlines()
    return lines[:next(i for i, l in enumerate(lines) if l.startswith(("val ", "step ")))]


def test_the_start_header_is_a_few_lines_and_the_full_plan_is_in_plan_txt_and_with_v(tmp_path):
    p = run("train", *TINY, "--steps", "2", "--out", tmp_path / "r")
    head = header(p.stdout)
    assert len(head) <= 6, head
    assert [l.split(":")[0] for l in head][:3] == ["plan", "device", "model"], head
    assert "memory per rank by mode" not in p.stdout and "host memory:" not in p.stdout, p.stdout
    assert "plan.txt" in head[-1] and head[-1].startswith("run: "), head
    plan = (tmp_path / "r" / "plan.txt").read_text()
    for needle in ("plan: float32", "device: cpu", "model: ", "memory: arena", "memory per rank by mode (1 rank(s)",
                   "  ZeRO-2 + offload ", "host memory: ", "memory: rank 0/1 (DDP), allocator"):
        assert needle in plan, (needle, plan)
    v = run("train", *TINY, "--steps", "2", "--out", tmp_path / "v", "-v")
    for needle in ("memory per rank by mode", "host memory: ", "memory: arena"):
        assert needle in v.stdout, (needle, v.stdout)
    assert run("train", *TINY, "--steps", "2", "--out", tmp_path / "w", "--verbose").stdout.count("host memory") == 1


def test_no_gpu_found_is_said_plainly(tmp_path):
    if any(re.fullmatch(r"nvidia\d+", f) for f in os.listdir("/dev")):
        pytest.skip("this machine has NVIDIA device files: 'no GPU found' is not what it should say")
    p = run("train", *TINY, "--steps", "1", "--out", tmp_path / "r", "--device", "auto")
    device = next(l for l in p.stdout.splitlines() if l.startswith("device: "))
    if "build: CUDA=0" in run("--version").stdout:
        assert device.startswith("device: cpu (no GPU: this build has no CUDA (built with CUDA=0"), device
        assert device.count("this build has no CUDA") == 1, device
        return
    assert device.startswith("device: cpu (no GPU found);"), device
    assert "cudaError" not in p.stdout and "driver" not in device, p.stdout
    # CUDA's own words are kept for the full plan and shown by detect
    assert re.search(r"^gpus: no GPU found \(CUDA reports \w+", (tmp_path / "r" / "plan.txt").read_text(), re.M)
    assert re.search(r"^gpus: no GPU found \(", run("detect", *TINY).stdout, re.M)


def progress_lines(out, what, unit):
    pat = re.compile(r"^%s: (\d+)/(\d+) %s \((\d+)%%\) \| [\d.]+ %s/s \| eta \S+$" % (re.escape(what), unit, unit))
    return [(int(m.group(1)), int(m.group(2))) for m in map(pat.match, out.splitlines()) if m]


def test_decoding_the_data_shows_progress_with_eta(tmp_path):
    pytest.importorskip("nibabel")
    from test_data import data_config, write_dataset
    csv = write_dataset(tmp_path, n=6)
    cfg = data_config(tmp_path, csv)
    p = run("train", "--config", cfg, "--steps", "1", "--out", tmp_path / "r", "--set", "data.cache_rate=0", env=EVERY)
    lines = progress_lines(p.stdout, "data: decoding the volumes", "volumes")
    assert lines == [(k, 6) for k in range(1, 7)], p.stdout
    assert re.search(r"^data: decoding the volumes: 6 volumes in [\d.]+ s$", p.stdout, re.M), p.stdout
    q = run("train", "--config", cfg, "--steps", "1", "--out", tmp_path / "c", "--set", "data.cache_rate=1", env=EVERY)
    assert progress_lines(q.stdout, "data: decoding and caching the volumes", "volumes") == lines, q.stdout
    # in a log with the default interval a short decode says nothing more than before
    assert "data: decoding" not in run("train", "--config", cfg, "--steps", "1", "--out", tmp_path / "d").stdout


def test_writing_a_large_checkpoint_shows_progress(tmp_path):
    # 4 MiB and more is written in 4 MiB pieces, each synced, with a line per piece here
    big = ["--set", "model.channels=[64,128]", "--set", "model.norm_groups=8"]
    p = run("train", *TINY, "--steps", "1", "--out", tmp_path / "r", *big, "--set", "train.val_samples=0", env=EVERY)
    size = os.path.getsize(tmp_path / "r" / "checkpoints" / "step_1.ckpt")
    assert size > 8 << 20, size
    pieces = [int(m.group(1)) for m in re.finditer(r"^writing step_1\.ckpt: (\d+)/(\d+) MiB \(\d+%\)", p.stdout, re.M)]
    assert len(pieces) == -(-size // (4 << 20)) and pieces[-1] == round(size / 1048576), (pieces, size, p.stdout)
    assert re.search(r"^writing step_1\.ckpt: \d+ MiB in [\d.]+ s$", p.stdout, re.M), p.stdout
    small = run("train", *TINY, "--steps", "1", "--out", tmp_path / "s", env=EVERY)  # a small file: one write, no line
    assert "writing " not in small.stdout


def test_bench_and_consolidate_show_progress(tmp_path):
    p = run("bench", "step", *TINY, "--iters", "2", "--warmup", "1", "--results", tmp_path / "res", env=EVERY)
    assert progress_lines(p.stdout, "bench step", "steps") == [(1, 3), (2, 3), (3, 3)], p.stdout
    k = run("bench", "kernels", *TINY, "--device", "cpu", "--ops", "silu_backward,sumsq", "--budget-ms", "5",
            "--reps", "3", "--results", tmp_path / "res", env=EVERY)
    cases = progress_lines(k.stdout, "bench kernels", "cases")
    assert cases and cases[-1][0] == cases[-1][1] and [c[0] for c in cases] == list(range(1, len(cases) + 1)), k.stdout
    run("train", *TINY, "--steps", "2", "--out", tmp_path / "z", "--zero", "1")
    c = run("ckpt", "consolidate", tmp_path / "z" / "checkpoints" / "step_2.zero", env=EVERY)
    assert progress_lines(c.stdout, "reading the shards", "shards") == [(1, 1)], c.stdout


def test_bench_scaling_shows_progress_per_rank_count(tmp_path):
    """bench scaling runs the trainer once per rank count (minutes in all on a real config): a line with the ETA
    after each."""
    p = run("bench", "scaling", *TINY, "--gpus", "1,2", "--mode", "weak", "--steps", "4", "--device", "cpu",
            "--results", tmp_path / "res", env=EVERY)
    assert progress_lines(p.stdout, "bench scaling", "rank counts") == [(1, 2), (2, 2)], p.stdout
    assert re.search(r"^bench scaling: 2 rank counts in [0-9.]+ s$", p.stdout, re.M), p.stdout
