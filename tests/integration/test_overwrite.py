"""Nothing is overwritten (issue 34): a command writes only files it creates in this invocation, or files of its own
run in a directory it locked. Each case once a reproduced loss:
- the atomic writer's fixed temporary name (path.tmp) consumed a user's file of that name."""
import os

from conftest import run

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
    """exit 2 and one line of voxscale's holding every needle (under mpirun, every rank's line that there is)."""
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    lines = [l for l in p.stderr.splitlines() if l.startswith("voxscale")]
    assert lines and (len(lines) == len(p.stderr.strip().splitlines()) or "mpirun" in p.args), p.stderr
    for line in lines:
        for n in needles:
            assert n in line, (n, line)


def test_a_users_file_named_like_the_temporary_is_left_alone(tmp_path):
    out = tmp_path / "R"
    (out / "checkpoints").mkdir(parents=True)
    mine = out / "checkpoints" / "step_2.ckpt.tmp"
    mine.write_bytes(b"mine")
    run("train", "--config", TINY, "--steps", "2", "--out", out, *QUIET)
    assert mine.read_bytes() == b"mine"  # it was opened, truncated and renamed into the checkpoint
    assert (out / "checkpoints" / "step_2.ckpt").stat().st_size > 1000
    assert not [f for f in os.listdir(out / "checkpoints") if f not in ("step_2.ckpt", "step_2.ckpt.tmp")]
