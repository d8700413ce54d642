"""Exits and messages (issue 34): every ending has its README exit code and a voxscale line that names the cause.

- A rank SIGKILLed under mpirun: mpirun SIGTERMs the others about a second later and only mpirun spoke (exit 137, no
  voxscale line); now each rank it ends says so in one line naming itself and exits 3 (mpirun's own code stays the
  dead rank's).
- A failed CPU allocation exited 1 from backend_cpu.c ("error at ...:28"), where the README says 5: now exit 5 with
  the bytes asked for and the plan's figures (an address-space limit below the planned arena makes it fail).
"""
import os
import re
import resource
import signal
import subprocess
import time

from conftest import MPIRUN, ROOT, VOXSCALE, needs_mpirun


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
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                environ = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
                exe = os.readlink("/proc/%s/exe" % pid)
            except OSError:
                continue
            if exe == os.path.realpath(VOXSCALE) and b"OMPI_COMM_WORLD_RANK=1" in environ:
                victim = int(pid)
    assert victim, "rank 1 never started"
    os.kill(victim, signal.SIGKILL)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 137, (p.returncode, err[-2000:])  # mpirun's: the SIGKILLed rank's
    assert re.search(r"^voxscale: rank 0/2 \(pid \d+ on \S+\): ended by mpirun \(SIGTERM\): a peer rank exited or "
                     r"the job is being stopped; exit 3$", err, re.M), err[-3000:]


def test_a_failed_allocation_is_exit_5_with_the_plans_figures(tmp_path):
    def limit():  # 1 GiB of address space: the binary and its libraries fit, the planned 1.24 GiB arena does not
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    p = subprocess.run([VOXSCALE, "train", "--config", "configs/test/tiny.json", "--steps", "1", "--out",
                        str(tmp_path / "run"), "--device", "cpu", "--set", "output.tensorboard=0",
                        "--set", "model.input_size=[64,64,64]", "--set", "train.batch_size=16"], cwd=ROOT,
                       capture_output=True, text=True, preexec_fn=limit, timeout=300)
    assert p.returncode == 5, (p.returncode, p.stderr)
    assert re.search(r"^voxscale: out of host memory: the CPU backend could not allocate 1\.24 GiB \(\d+ bytes\); "
                     r"the plan: cpu arena 1272\.0 MiB \+ [0-9.]+ MiB parameters, gradients and AdamW state = "
                     r"[0-9.]+ MiB at batch 16; lower train.batch_size", p.stderr), p.stderr
