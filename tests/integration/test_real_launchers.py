"""The launchers the seeds' users start PyTorch with, run for real on CPU ranks (issue 37): torchrun (Debian's
/usr/bin/torchrun, torch 1.13) on one node and as two "nodes" on one host, the README's own torchrun lines, and
DeepSpeed's `deepspeed` launcher (0.19.8, ci/deps.sh's .venv-launchers). Each starts 2 ranks of voxscale that must
train the 1-rank model to the data-parallel tolerance (test_distributed.assert_same_training). accelerate's CLI,
which starts torchrun's ranks from its own process, is test_launchers.py's.

Debian 12's torchrun crashes before it starts a rank with its default `--redirects 0 --tee 0`: torch 1.13's
Std.from_str("0") finds no member under Python 3.11 (its IntFlag iteration skips the 0 member) and returns None.
Any other value works, so where that bug is present (probed, not assumed) the runs add `--redirects 1 --tee 1`
(rank output copied to the console with a `[default0]:` prefix and to --log_dir); newer torchrun needs nothing."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, VOXSCALE
from test_distributed import assert_same_training
from test_launchers import QUIET, TINY, clean_env, deepspeed_two_rank_case, train

TORCHRUN = shutil.which("torchrun")
DEEPSPEED = shutil.which("deepspeed", path=os.path.join(ROOT, ".venv-launchers", "bin"))
needs_torchrun = pytest.mark.skipif(TORCHRUN is None, reason="no torchrun (ci/deps.sh installs Debian's python3-torch)")
needs_deepspeed = pytest.mark.skipif(DEEPSPEED is None, reason="no deepspeed launcher (ci/deps.sh installs DeepSpeed "
                                     "0.19.8 into .venv-launchers)")


def torchrun_needs_redirects():
    """True where this torch's Std.from_str('0') is None (the crash above), read from torchrun's own Python (this
    one where there is no torchrun: accelerate runs torch.distributed.run in its own process)."""
    python = sys.executable
    if TORCHRUN:
        with open(TORCHRUN) as f:
            python = f.readline()[2:].strip().split()[0]
    p = subprocess.run([python, "-c", "from torch.distributed.elastic.multiprocessing.api import Std; "
                        "print(Std.from_str('0') is None)"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip() == "True"


def torchrun_fixups(tmp_path):
    if not torchrun_needs_redirects():
        return []
    return ["--redirects", "1", "--tee", "1", "--log_dir", str(tmp_path / "torchrun-logs")]


def port(offset):
    return 29500 + (os.getpid() * 7 + offset * 131) % 2000


def one_rank_reference(out, steps=10):
    """One process, global batch 8: what the 2-rank runs below must reproduce."""
    p = train(out, "--device", "cpu", "--set", "train.global_batch=8", steps=steps)
    assert p.returncode == 0, p.stderr


def launched(cmd, **kw):
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(), **kw)


@needs_torchrun
def test_torchrun_one_node_two_ranks_train_the_one_rank_model(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one_rank_reference(one)
    p = launched([TORCHRUN, "--nproc_per_node", "2", "--master_port", str(port(1)), *torchrun_fixups(tmp_path),
                  "--no_python", VOXSCALE, "train", "--config", TINY, "--steps", "10", "--out", str(two),
                  "--device", "cpu", "--set", "train.global_batch=8", *QUIET])
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, out[-3000:] + err[-3000:]
    assert "2 ranks (torchrun), this is rank 0 (local 0 of 2)" in out, out[-3000:]
    assert_same_training(two, one, 10)


def readme_torchrun_lines():
    """The README's torchrun commands (continuation lines joined), as a user would copy them."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().replace("\\\n", " ")
    return [re.sub(r"\s+", " ", l).strip() for l in text.split("\n") if re.match(r"^\s*torchrun\s", l)]


def test_the_readme_has_torchrun_lines():
    lines = readme_torchrun_lines()
    assert any("--nnodes 2" in l and "--node_rank" in l for l in lines), lines
    assert any("--nproc_per_node 2" in l for l in lines), lines


@needs_torchrun
def test_the_readmes_torchrun_lines_run(tmp_path):
    """Each README torchrun line, with this host for node0, 1 rank per node for 8 GPUs, a free port, the tiny
    config for the real one, the binary under test for `voxscale`; a two-node line starts both nodes here, each its
    own torchrun (static rendezvous on --master_addr:--master_port), and the two ranks train the 1-rank model."""
    one = tmp_path / "one"
    one_rank_reference(one)
    for i, line in enumerate(readme_torchrun_lines()):
        args = line.split()[1:]
        nodes = int(args[args.index("--nnodes") + 1]) if "--nnodes" in args else 1
        out = tmp_path / ("readme%d" % i)
        subst = {"node0": "127.0.0.1", "29500": str(port(10 + i)), "voxscale": VOXSCALE, "8": "1",
                 "build/voxscale": VOXSCALE}
        fixed, skip_value = [], False
        for j, a in enumerate(args):
            if skip_value:
                skip_value = False
                continue
            prev = args[j - 1] if j else ""
            if prev in ("--master_addr", "--master_port", "--nproc_per_node") or a in ("voxscale", "build/voxscale"):
                a = subst.get(a, a)
            if a in ("--config", "--out", "--steps"):  # the run's own: the tiny config, 10 steps, a fresh folder
                skip_value = True
                continue
            fixed.append(a)
        prog = fixed.index("--no_python")
        torchrun_args = [a for a in fixed[:prog] if a not in ("--node_rank", "R")]
        ranks_per_node = int(torchrun_args[torchrun_args.index("--nproc_per_node") + 1])
        tail = fixed[prog:] + ["--config", TINY, "--steps", "10", "--out", str(out), "--device", "cpu",
                               "--set", "train.global_batch=8", *QUIET]
        procs = []
        for node in range(nodes):
            rank_flag = ["--node_rank", str(node)] if nodes > 1 else []
            procs.append(launched([TORCHRUN, *torchrun_args, *rank_flag, *torchrun_fixups(tmp_path / str(node)),
                                   *tail]))
        outs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0] * nodes, (line, outs)
        world = nodes * ranks_per_node
        assert ("%d ranks (torchrun), this is rank 0" % world) in outs[0][0], (line, outs[0][0][-3000:])
        assert world == 2, "the substituted line must give 2 ranks to compare: %s" % line
        assert_same_training(out, one, 10)


@needs_deepspeed
def test_the_deepspeed_launcher_runs_two_ranks_that_train_the_one_rank_model(tmp_path):
    """`deepspeed --num_gpus 2 --no_python --no_local_rank voxscale train --deepspeed-config ds.json`: on a machine
    without GPUs DeepSpeed takes its CPU accelerator, and --num_gpus 2 still starts 2 processes through its
    launch.py (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE, MASTER_ADDR, MASTER_PORT)."""
    ds, one = deepspeed_two_rank_case(tmp_path)
    two = tmp_path / "two"
    p = launched([DEEPSPEED, "--num_gpus", "2", "--master_port", str(port(2)), "--no_python", "--no_local_rank",
                  VOXSCALE, "train", "--config", TINY, "--steps", "10", "--out", str(two), "--device", "cpu",
                  "--deepspeed-config", str(ds), "--lr-scaling", "none", *QUIET])
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, out[-3000:] + err[-3000:]
    assert "2 ranks (torchrun), this is rank 0 (local 0 of 2)" in out, out[-3000:]
    assert "gradient_accumulation_steps 2 -> --set train.grad_accum=2" in out, out[-3000:]
    assert out.count("step    10/10") == 1, "rank 0 alone prints progress"
    assert_same_training(two, one, 10)


@needs_deepspeed
def test_the_deepspeed_launcher_without_no_local_rank_is_one_line_naming_the_flag(tmp_path):
    p = launched([DEEPSPEED, "--num_gpus", "1", "--master_port", str(port(3)), "--no_python", VOXSCALE, "train",
                  "--config", TINY, "--steps", "1", "--out", str(tmp_path / "run"), "--device", "cpu", *QUIET])
    out, err = p.communicate(timeout=300)
    assert p.returncode != 0
    lines = [l for l in (out + err).splitlines() if l.startswith("voxscale:")]
    assert len(lines) == 1 and "--local_rank=0" in lines[0] and "--no_local_rank" in lines[0], out + err
    assert not (tmp_path / "run").exists(), "refused before anything was written"
