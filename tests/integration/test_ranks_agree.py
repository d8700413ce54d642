"""Ranks that disagree (issue 24): MPMD mpirun and hand-set torchrun environments with different configs or resume
states end on every rank with exit 2 and one line naming the first differing key and the ranks, before any
collective that depends on the config (an MPMD launch with another model.channels overflowed rank 0's bucket
buffer) and before rank 0 takes the run directory; a failed launch leaves no directory; a partial torchrun
environment is refused; a foreign service on the rendezvous port is named as such; --gpus is bounded by the cores
on the CPU and said to be ignored under a launcher. VOXSCALE can name a sanitizer build (make asan), under which
these run too."""
import json
import os
import socket
import subprocess
import threading

import pytest

from conftest import MPIRUN, ROOT, VOXSCALE, run

TINY = "configs/test/tiny.json"
QUIET = ["--threads", "1", "--set", "train.val_samples=0", "--set", "output.tensorboard=0", "--set",
         "train.log_every=1", "--set", "dist.timeout_s=60"]
HAVE_MPI = subprocess.run(["which", "mpirun"], capture_output=True).returncode == 0


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def torchrun(rank_args, timeout=120, env_extra=None, port=None):
    """One process per entry of rank_args (its own arguments after `train`), a torchrun environment set by hand."""
    port = port or free_port()
    procs = []
    world = len(rank_args)
    for rank, args in enumerate(rank_args):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   VX_RENDEZVOUS_PORT=str(port), **(env_extra or {}))
        procs.append(subprocess.Popen([VOXSCALE, "train", *map(str, args)], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=timeout) for p in procs]
    return [p.returncode for p in procs], outs


def mpmd(rank_args, timeout=120):
    """mpirun -np 1 voxscale train A : -np 1 voxscale train B : ..."""
    cmd = list(MPIRUN)
    for i, args in enumerate(rank_args):
        cmd += ([":"] if i else []) + ["-np", "1", VOXSCALE, "train", *map(str, args)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def config(tmp_path, name, **train_or_model):
    spec = json.loads(open(os.path.join(ROOT, TINY)).read())
    for k, v in train_or_model.items():
        section, key = k.split("__")
        spec.setdefault(section, {})[key] = v
    path = tmp_path / name
    path.write_text(json.dumps(spec))
    return path


def agreement_lines(stderr):
    return [l for l in stderr.splitlines() if "the ranks do not agree" in l]


def assert_no_sanitizer_report(text):
    assert "ERROR: AddressSanitizer" not in text and "runtime error:" not in text, text[-3000:]
    assert "corrupted" not in text and "Segmentation" not in text, text[-3000:]


@pytest.mark.skipif(not HAVE_MPI, reason="mpirun (openmpi-bin) is not installed; ci/deps.sh installs it")
@pytest.mark.parametrize("world", [2, 3])
def test_mpmd_ranks_with_another_model_exit_2_on_every_rank_before_any_collective(tmp_path, world):
    """rank 0 received rank 1's larger gradient bucket into its smaller buffer: 'malloc(): corrupted top size'."""
    a = config(tmp_path, "a.json")
    b = config(tmp_path, "b.json", model__channels=[8, 16], model__norm_groups=4)
    out = tmp_path / "run"
    args = [["--config", a, "--steps", "3", "--out", out, *QUIET]] * (world - 1) + \
           [["--config", b, "--steps", "3", "--out", out, *QUIET]]
    p = mpmd(args)
    assert_no_sanitizer_report(p.stdout + p.stderr)
    assert p.returncode == 2, (p.returncode, p.stderr[-3000:])
    lines = agreement_lines(p.stderr)
    assert len(lines) == world, p.stderr[-3000:]
    for rank in range(world):  # every rank says it, each with its own value
        line = [l for l in lines if "rank %d/%d:" % (rank, world) in l]
        assert line and "1 rank(s) (%d) differ from rank 0, first in model.channels" % (world - 1) in line[0], lines
    assert any("(this rank: [8,16])" in l for l in lines) and any("(this rank: [4,8])" in l for l in lines), lines
    assert not out.exists(), "rank 0 took the run directory before the ranks agreed"


@pytest.mark.parametrize("world", [2, 3])
def test_tcp_ranks_with_another_seed_exit_2_on_every_rank(tmp_path, world):
    out = tmp_path / "run"
    args = [["--config", TINY, "--steps", "3", "--out", out, *QUIET]] * (world - 1) + \
           [["--config", TINY, "--steps", "3", "--out", out, "--seed", "99", *QUIET]]  # tiny: 7
    codes, outs = torchrun(args)
    err = "".join(o[1] for o in outs)
    assert_no_sanitizer_report(err)
    assert codes == [2] * world, (codes, err[-3000:])
    for rank, (_, e) in enumerate(outs):
        lines = agreement_lines(e)
        assert len(lines) == 1 and "rank %d/%d:" % (rank, world) in lines[0], e
        assert "differ from rank 0, first in train.seed" in lines[0] and "(%d)" % (world - 1) in lines[0], lines
    assert not out.exists()


@pytest.mark.parametrize("what,extra,needle", [
    ("model", ["--set", "model.channels=[8,16]", "--set", "model.norm_groups=4"], "model.channels"),  # was exit 3
    ("input size", ["--set", "model.input_size=[16,16,16]"], "model.input_size"),
    ("batch", ["--batch-size", "1"], "train.batch_size"),
    ("learning rate", ["--lr", "2e-3"], "train.lr"),
    ("data source", ["--set", "data.noise=0.05"], "data.noise"),
    ("out", ["--out", "OTHER"], "output.dir"),
])
def test_tcp_ranks_that_differ_in_what_is_trained_are_refused(tmp_path, what, extra, needle):
    out = tmp_path / "run"
    extra = [str(tmp_path / "other") if x == "OTHER" else x for x in extra]
    codes, outs = torchrun([["--config", TINY, "--steps", "3", "--out", out, *QUIET],
                            ["--config", TINY, "--steps", "3", "--out", out, *QUIET, *extra]])
    assert codes == [2, 2], (codes, outs)
    assert all("first in %s" % needle in "".join(agreement_lines(e)) for _, e in outs), outs
    assert not out.exists() and not (tmp_path / "other").exists()


def test_one_rank_resuming_and_another_starting_fresh_is_refused(tmp_path):
    first = tmp_path / "first"
    run("train", "--config", TINY, "--steps", "2", "--out", first, *QUIET)
    ckpt = first / "checkpoints" / "step_2.ckpt"
    out = tmp_path / "run"
    codes, outs = torchrun([["--config", TINY, "--steps", "4", "--out", out, "--resume", ckpt, *QUIET],
                            ["--config", TINY, "--steps", "4", "--out", out, *QUIET]])
    assert codes == [2, 2], (codes, outs)
    lines = [agreement_lines(e)[0] for _, e in outs]
    assert "first in the resume state" in lines[0] and "(this rank: step 2)" in lines[0], lines
    assert "(this rank: a fresh start)" in lines[1], lines
    assert not out.exists()


def test_keys_that_may_differ_per_rank_do(tmp_path):
    out = tmp_path / "run"
    codes, outs = torchrun([["--config", TINY, "--steps", "2", "--out", out, *QUIET, "--set", "data.prefetch=3"],
                            ["--config", TINY, "--steps", "2", "--out", out, *QUIET, "--threads", "2"]])
    assert codes == [0, 0], outs
    assert (out / "checkpoints" / "step_2.ckpt").exists()


def test_a_launch_whose_peer_never_comes_leaves_no_run_directory(tmp_path):
    """Rank 0 took and wrote the run directory before the rendezvous: every failed launch blocked its rerun."""
    out = tmp_path / "run"
    port = free_port()
    env = dict(os.environ, RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), VX_RENDEZVOUS_PORT=str(port))
    p = subprocess.run([VOXSCALE, "train", "--config", TINY, "--steps", "2", "--out", str(out), *QUIET,
                        "--set", "dist.timeout_s=2"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 3 and "1 of 2 ranks arrived" in p.stderr, (p.returncode, p.stderr)
    assert not out.exists(), "a launch that never met its peer made the run directory"
    codes, outs = torchrun([["--config", TINY, "--steps", "2", "--out", out, *QUIET]] * 2)  # the rerun
    assert codes == [0, 0], outs


@pytest.mark.parametrize("env,missing", [
    ({"WORLD_SIZE": "2"}, "RANK and LOCAL_RANK are not set, but WORLD_SIZE is"),
    ({"RANK": "1"}, "WORLD_SIZE and LOCAL_RANK are not set, but RANK is"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "LOCAL_RANK is not set, but RANK and WORLD_SIZE are"),
])
def test_a_partial_torchrun_environment_is_refused(tmp_path, env, missing):
    """WORLD_SIZE=2 without RANK trained as one process with exit 0: each process of a real launch alone."""
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    p = run("train", "--config", TINY, "--steps", "1", "--out", tmp_path / "r", check=False, env=dict(clean, **env))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (p.returncode, p.stderr)
    assert missing in p.stderr and "torchrun" in p.stderr, p.stderr
    assert not (tmp_path / "r").exists()


def test_a_foreign_service_on_the_rendezvous_port_is_named(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]

    def answer():  # an HTTP server, say: it reads a little and answers with its own bytes
        for _ in range(4):
            try:
                c, _ = srv.accept()
            except OSError:
                return
            c.recv(64)
            c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            c.close()
    threading.Thread(target=answer, daemon=True).start()
    env = dict(os.environ, RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), VX_RENDEZVOUS_PORT=str(port))
    p = subprocess.run([VOXSCALE, "train", "--config", TINY, "--steps", "1", "--out", str(tmp_path / "r"), *QUIET,
                        "--set", "dist.timeout_s=10"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    srv.close()
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert "not a voxscale rendezvous" in p.stderr and "answered with bytes" in p.stderr, p.stderr
    assert "another process is rank" not in p.stderr, p.stderr


def test_gpus_on_the_cpu_is_bounded_by_the_cores_and_ignored_under_a_launcher(tmp_path):
    p = run("train", "--config", TINY, "--steps", "1", "--out", tmp_path / "r", "--gpus", "1000", "--device",
            "cpu", check=False, timeout=60)
    assert p.returncode == 2 and "1000 CPU ranks on" in p.stderr and "one rank per core" in p.stderr, p.stderr
    assert not (tmp_path / "r").exists()
    if HAVE_MPI:
        p = subprocess.run([*MPIRUN, "-np", "2", VOXSCALE, "train", "--config", TINY, "--steps", "1", "--out",
                            str(tmp_path / "m"), "--gpus", "4", "--device", "cpu", *QUIET], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        assert p.stdout.count("--gpus 4 (dist.gpus) is ignored: the 2 ranks come from mpirun") == 1, p.stdout
