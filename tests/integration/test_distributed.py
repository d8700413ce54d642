"""Data parallelism on CPU ranks (no GPU here): MPI ranks under mpirun, tcp ranks started by `train --gpus N
--device cpu` and by a torchrun environment set by hand. With the same global batch every number of ranks trains the
same model as one process (float32 sums in another order: within 1e-5), gradient accumulation and resume across
world sizes included; a stopped rank meets the watchdog, a killed one ends the run; the bucket all-reduces overlap
backward."""
import json
import os
import signal
import struct
import subprocess
import sys
import time

import pytest

from conftest import MPIRUN, ROOT, VOXSCALE, metrics, mpi, needs_mpirun, rank_pids, run

TINY = "configs/test/tiny.json"
HEADER = struct.Struct("<8sIIQQqqqqd")
# every run: one thread per rank (2 cores, up to 4 ranks), no validation or TensorBoard (rank 0 alone does them)
QUIET = ["--threads", "1", "--set", "train.val_samples=0", "--set", "output.tensorboard=0", "--set",
         "train.log_every=1"]

pytestmark = needs_mpirun




def params(ckpt):
    """The packed parameters of a checkpoint as floats."""
    data = open(ckpt, "rb").read()
    count = HEADER.unpack_from(data)[3]
    return struct.unpack_from("<%df" % count, data, HEADER.size)


def rel_err(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5
    den = sum(y * y for y in b) ** 0.5
    return num / den


def losses(out):
    return {m["step"]: m["loss"] for m in metrics(out) if "loss" in m}


def assert_same_training(a, b, steps, tol=1e-5):
    """Loss curves and final parameters of runs a and b agree within tol (relative); returns the errors seen."""
    la, lb = losses(a), losses(b)
    assert sorted(la) == sorted(lb) == list(range(1, steps + 1))
    loss_err = max(abs(la[s] - lb[s]) / abs(lb[s]) for s in la)
    param_err = rel_err(params(a / "checkpoints" / ("step_%d.ckpt" % steps)),
                        params(b / "checkpoints" / ("step_%d.ckpt" % steps)))
    print("\n%s vs %s: loss curve max relative error %.2e, final parameters relative error %.2e" %
          (a.name, b.name, loss_err, param_err))
    assert loss_err < tol and param_err < tol, (loss_err, param_err)
    return loss_err, param_err


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The reference: one process, global batch 8, 20 steps."""
    out = tmp_path_factory.mktemp("single") / "run"
    run("train", "--config", TINY, "--steps", "20", "--out", out, "--set", "train.global_batch=8",
        "--set", "train.ckpt_every=10", *QUIET)
    return out


@pytest.mark.parametrize("world", [2, 4])
def test_mpi_ranks_train_the_single_process_model(tmp_path, single, world):
    out = tmp_path / ("mpi%d" % world)
    p = mpi(world, "train", "--config", TINY, "--steps", "20", "--out", out, "--set", "train.global_batch=8",
            "--set", "dist.bucket_mb=0.005", "--set", "dist.first_bucket_mb=0.002", *QUIET)
    assert ("%d ranks (mpirun)" % world) in p.stdout and "mpi communicator" in p.stdout
    assert "batch %d per rank x %d ranks" % (8 // world, world) in p.stdout
    assert p.stdout.count("step    20/20") == 1, "only rank 0 prints progress"
    assert_same_training(out, single, 20)
    assert sorted(os.listdir(out)) == sorted(os.listdir(single)), "rank 0 alone writes the run directory"


def test_accumulation_on_two_ranks_equals_one_rank(tmp_path, single):
    out = tmp_path / "accum"
    mpi(2, "train", "--config", TINY, "--steps", "20", "--out", out, "--set", "train.global_batch=8",
        "--set", "train.grad_accum=2", *QUIET)
    assert json.loads((out / "config.json").read_text())["train"]["batch_size"] == 2
    assert_same_training(out, single, 20)


def test_a_checkpoint_of_4_ranks_resumes_on_2_and_on_1(tmp_path, single):
    four = tmp_path / "four"
    mpi(4, "train", "--config", TINY, "--steps", "20", "--out", four, "--set", "train.global_batch=8",
        "--set", "train.ckpt_every=10", *QUIET)
    ckpt = four / "checkpoints" / "step_10.ckpt"
    assert HEADER.unpack_from(ckpt.read_bytes())[8] == 4  # world_size
    for world in (2, 1):
        out = tmp_path / ("resumed%d" % world)
        args = ["train", "--config", TINY, "--steps", "20", "--out", out, "--resume", ckpt,
                "--set", "train.global_batch=8", *QUIET]
        p = mpi(world, *args) if world > 1 else run(*args)
        assert "resumed:" in p.stdout and "sample 80" in p.stdout  # 10 steps x 8 samples
        la, lb = losses(out), losses(four)
        assert sorted(la) == list(range(11, 21))
        err = max(abs(la[s] - lb[s]) / abs(lb[s]) for s in la)
        perr = rel_err(params(out / "checkpoints" / "step_20.ckpt"), params(four / "checkpoints" / "step_20.ckpt"))
        print("\nresumed on %d rank(s) vs 4 ranks: losses %.2e, parameters %.2e" % (world, err, perr))
        assert err < 1e-5 and perr < 1e-5


def test_spawned_cpu_ranks_train_the_single_process_model(tmp_path, single):
    out = tmp_path / "spawn"
    p = run("train", "--config", TINY, "--steps", "20", "--out", out, "--gpus", "2", "--device", "cpu",
            "--set", "train.global_batch=8", *QUIET)
    assert "2 ranks started by train --gpus 2" in p.stdout and "tcp communicator" in p.stdout
    assert_same_training(out, single, 20)


def test_a_torchrun_environment_is_read(tmp_path, single):
    """torchrun --no-python voxscale ... sets these; here they are set by hand (tcp ranks on CPUs)."""
    out = tmp_path / "torchrun"
    port = 29500 + os.getpid() % 1000
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([VOXSCALE, "train", "--config", TINY, "--steps", "20", "--out", str(out),
                                       "--set", "train.global_batch=8", *QUIET], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "2 ranks (torchrun)" in outs[0][0]
    assert_same_training(out, single, 20)


def start_long_run(argv, out):
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (out / "metrics.jsonl").exists():
        time.sleep(0.1)
    while time.time() < deadline and len([m for m in metrics(out) if "loss" in m]) < 3:
        time.sleep(0.1)
    return proc


def test_a_stopped_rank_meets_the_watchdog(tmp_path):
    out = tmp_path / "stop"
    proc = start_long_run([*MPIRUN, "-np", "2", VOXSCALE, "train", "--config", TINY, "--steps", "100000",
                           "--out", str(out), "--set", "dist.timeout_s=3", *QUIET], out)
    victims = rank_pids(str(out), "OMPI_COMM_WORLD_RANK", 1)
    assert victims, "rank 1 not found"
    try:
        t0 = time.time()
        os.kill(victims[0], signal.SIGSTOP)
        stdout, stderr = proc.communicate(timeout=60)
        took = time.time() - t0
    finally:
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert proc.returncode != 0
    line = [l for l in stderr.splitlines() if "rank 0/2" in l and "dist.timeout_s" in l]
    assert line, stderr[-3000:]
    assert "all-reduce (sum) of" in line[0] and ("bucket" in line[0] or "losses" in line[0]), line[0]
    print("\nwatchdog: %s (%.1f s after SIGSTOP)" % (line[0], took))
    assert took < 3 + 20


def test_a_killed_spawned_rank_ends_the_run_with_a_clear_line(tmp_path):
    out = tmp_path / "kill"
    proc = start_long_run([VOXSCALE, "train", "--config", TINY, "--steps", "100000", "--out", str(out),
                           "--gpus", "2", "--device", "cpu", *QUIET], out)
    victims = rank_pids(str(out), "VX_RANK", 1)
    assert victims, "rank 1 not found"
    t0 = time.time()
    os.kill(victims[0], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 3, (proc.returncode, stderr)
    assert "rank 1/2 (pid %d) was killed by signal 9" % victims[0] in stderr, stderr
    print("\nkilled rank: run ended %.1f s later with %r" % (time.time() - t0, stderr.strip().splitlines()[0]))


def test_sigint_to_the_spawning_parent_stops_every_rank_with_a_checkpoint(tmp_path):
    out = tmp_path / "int"
    proc = start_long_run([VOXSCALE, "train", "--config", TINY, "--steps", "100000", "--out", str(out),
                           "--gpus", "2", "--device", "cpu", *QUIET], out)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    ckpts = os.listdir(out / "checkpoints")
    assert len(ckpts) == 1, ckpts
    step = int(ckpts[0][5:-5])
    assert HEADER.unpack_from((out / "checkpoints" / ckpts[0]).read_bytes())[6] == step * 4  # 2 ranks x batch 2


def test_a_rank_that_refuses_to_start_ends_the_run_with_its_code(tmp_path):
    out = tmp_path / "busy"
    run("train", "--config", TINY, "--steps", "1", "--out", out, *QUIET)
    p = run("train", "--config", TINY, "--steps", "1", "--out", out, "--gpus", "2", "--device", "cpu", *QUIET,
            check=False, timeout=120)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "rank 0/2: run directory" in p.stderr and "already holds a run" in p.stderr


def test_bucket_all_reduces_overlap_backward(tmp_path):
    out = tmp_path / "overlap"
    mpi(2, "train", "--config", TINY, "--steps", "4", "--out", out, "--profile", "3:3",
        "--set", "dist.bucket_mb=0.004", "--set", "dist.first_bucket_mb=0.002", *QUIET)
    # the tool ci/gpu.sh runs on NCCL's kernels reads the CPU communicators' events the same way
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from bucket_timeline import timeline
    t = timeline(str(out), 3)
    assert len(t["allreduces"]) >= 3, "expected several buckets"
    assert t["started_during_backward"] >= 2, "bucket all-reduces must start while backward runs"
    print("\noverlap: %d of %d all-reduces started during backward; comm wait %.3f ms, all-reduces %.3f ms in all" %
          (t["started_during_backward"], len(t["allreduces"]), t["comm_wait_ms"], t["allreduce_ms_total"]))
    assert t["comm_wait_ms"] < t["allreduce_ms_total"]
    # what ci/gpu.sh's nccl step asks of two ranks: the evidence, on the command line
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bucket_timeline.py"), str(out), "--step", "3",
                        "--require-overlap", "2"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_one_rank_is_no_overlap_evidence(tmp_path):
    """One process has no all-reduce to time (as one NCCL rank launches no kernel for an in-place sum): the check that
    ci/gpu.sh's nccl step requires of its timeline fails in one line instead of passing on nothing."""
    out = tmp_path / "one"
    run("train", "--config", TINY, "--steps", "4", "--out", out, "--profile", "3:3", *QUIET)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bucket_timeline.py"), str(out),
                        "--require-overlap", "1"], capture_output=True, text=True)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "no overlap evidence: 0 all-reduces in step 3" in p.stdout and "nothing was measured" in p.stdout, p.stdout


def test_detect_shows_the_launch(tmp_path):
    p = run("detect", "--config", TINY, "--gpus", "2", "--device", "cpu", "--set", "train.global_batch=16")
    assert "launch: 2 ranks started by train --gpus 2" in p.stdout
    assert "batch size: 8 per micro-batch per rank x 2 rank(s) x 1 accumulation = 16 samples per step" in p.stdout
    p = mpi(2, "detect", "--config", TINY)
    assert "2 ranks (mpirun)" in p.stdout


def test_global_batch_must_divide(tmp_path):
    p = run("train", "--config", TINY, "--set", "train.global_batch=7", "--set", "train.grad_accum=2",
            "--out", tmp_path / "r", check=False)
    assert p.returncode == 2 and "train.global_batch = 7" in p.stderr


def test_ranks_running_ahead_drain_at_the_same_steps(tmp_path):
    """--compile lets the host run a step ahead and drain before host work; every rank must drain at the same steps.
    Only rank 0 writes histograms: a rank 0 that drained alone at step 5 would see the injected non-finite gradient
    (no loss scaling: the run ends, exit 4) there and leave, while rank 1 had already enqueued step 6, whose
    all-reduces then met a closed connection (exit 3) instead of ending on the same divergence."""
    out = tmp_path / "ahead"
    p = run("train", "--config", TINY, "--steps", "10", "--out", out, "--gpus", "2", "--device", "cpu", "--compile",
            "--threads", "1", "--set", "train.val_samples=0", "--set", "train.log_every=1",
            "--set", "output.tensorboard=1", "--set", "output.hist_every=5", "--set", "output.image_every=0",
            check=False, timeout=120, env=dict(os.environ, VX_TEST_NONFINITE_GRAD="5"))
    assert p.returncode == 4, (p.returncode, p.stderr[-3000:])
    for rank in (0, 1):  # both ranks collect step 5 together, after its all-reduces: both say so
        assert "rank %d/2: training diverged at step 5: the gradient norm is nan" % rank in p.stderr, p.stderr[-3000:]
    assert "communicator" not in p.stderr, p.stderr[-3000:]  # no rank met a vanished peer (seen before the fix)
