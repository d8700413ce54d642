"""Slurm for real (issue 37 item 4): a one-node Slurm (Debian's slurm-wlm: munged, slurmctld and slurmd on localhost,
all from a temp dir) started by the module's fixture; `srun -n 2` trains the 1-rank model (ranks from SLURM_*, MPI
over PMIx), examples/slurm/train.sbatch trains to the end under `sbatch --wait`, and a scancel'd job ends every rank
with a line naming SIGTERM and leaves a checkpoint that --resume accepts. Skips, saying why, where the binaries are
missing, the user is not root (slurmd runs the tasks as their user) or the daemons do not come up within 30 s."""
import glob
import os
import re
import shutil
import socket
import subprocess
import time

import pytest

from conftest import ROOT, VOXSCALE
from test_distributed import assert_same_training
from test_launchers import QUIET, clean_env

TINY = "configs/test/tiny.json"
SBATCH = os.path.join(ROOT, "examples", "slurm", "train.sbatch")
DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scancel", "sinfo", "squeue")
UP_S = 30  # how long the daemons get to show the node idle


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mpi_plugin():
    """pmix where Slurm has its plugin (Debian's Open MPI is built with PMIx), else pmi2."""
    return "pmix" if glob.glob("/usr/lib/*/slurm-wlm/mpi_pmix.so") + glob.glob("/usr/lib*/slurm/mpi_pmix.so") \
        else "pmi2"


def tail(path, n=8):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return "(%s)" % e


class Slurm:
    def __init__(self, d):
        self.d = d
        self.conf = os.path.join(d, "slurm.conf")
        self.procs = []
        self.log = None
        self.mpi = mpi_plugin()

    def env(self, **extra):
        # the launcher variables of a developer's shell dropped (clean_env); Open MPI's shared-memory single copy off
        # (ptrace is denied in containers), as conftest's MPIRUN does
        return clean_env(SLURM_CONF=self.conf, OMPI_MCA_btl_vader_single_copy_mechanism="none", **extra)

    def run(self, *cmd, timeout=120, **kw):
        return subprocess.run(list(map(str, cmd)), cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env=self.env(), **kw)

    def start(self):
        d = self.d
        for sub in ("state", "spool", "munge"):
            os.makedirs(os.path.join(d, sub), mode=0o700)
        key = os.path.join(d, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(key, 0o400)
        sock = os.path.join(d, "munge", "munge.sock")
        with open(self.conf, "w") as f:
            # proctrack/linuxproc and task/none: no cgroups in a container; one node of this machine's CPUs;
            # ports picked free so that a Slurm already on the host is untouched
            f.write("\n".join([
                "ClusterName=vxtest", "SlurmctldHost=localhost",
                "SlurmctldPort=%d" % free_port(), "SlurmdPort=%d" % free_port(),
                "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "AuthInfo=socket=%s" % sock,
                "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
                "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
                "StateSaveLocation=%s/state" % d, "SlurmdSpoolDir=%s/spool" % d,
                "SlurmctldPidFile=%s/slurmctld.pid" % d, "SlurmdPidFile=%s/slurmd.pid" % d,
                "SlurmctldLogFile=%s/slurmctld.log" % d, "SlurmdLogFile=%s/slurmd.log" % d,
                "MpiDefault=%s" % self.mpi, "ReturnToService=2", "KillWait=30",
                "NodeName=localhost CPUs=%d RealMemory=1000 State=UNKNOWN" % os.cpu_count(),
                # more tasks than CPUs (2 ranks on a 1-CPU machine) and two jobs at once
                "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE",
                ""]))
        logs = os.path.join(d, "daemons.log")
        self.log = open(logs, "w")
        self.procs.append(subprocess.Popen(
            ["munged", "-F", "--force", "--key-file", key, "--socket", sock, "--log-file", d + "/munged.log",
             "--pid-file", d + "/munge/munged.pid", "--seed-file", d + "/munge/seed"],
            stdout=self.log, stderr=subprocess.STDOUT))
        time.sleep(0.5)
        for cmd in (["slurmctld", "-D", "-i"], ["slurmd", "-D"]):
            self.procs.append(subprocess.Popen(cmd, env=self.env(), stdout=self.log, stderr=subprocess.STDOUT))
        t_end = time.time() + UP_S
        while time.time() < t_end:
            try:  # (a slurmctld not answering yet makes sinfo wait out its MessageTimeout)
                p = self.run("sinfo", "-h", "-o", "%t", timeout=10)
                if p.returncode == 0 and p.stdout.strip() == "idle":
                    return None
            except subprocess.TimeoutExpired:
                pass
            if any(pr.poll() is not None for pr in self.procs):
                break
            time.sleep(0.5)
        return "the one-node Slurm did not come up within %d s; its logs end:\n%s\n%s\n%s\n%s" % (
            UP_S, tail(logs), tail(d + "/munged.log"), tail(d + "/slurmctld.log"), tail(d + "/slurmd.log"))

    def stop(self):
        try:  # jobs a failed test left (none when all passed)
            self.run("scancel", "--user", "root", timeout=20)
        except subprocess.TimeoutExpired:
            pass
        for p in reversed(self.procs):
            p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.log:
            self.log.close()


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    missing = [b for b in DAEMONS if shutil.which(b) is None]
    if missing:
        pytest.skip("Slurm is not installed (no %s); ci/deps.sh installs slurm-wlm and munge" % ", ".join(missing))
    if os.geteuid() != 0:
        pytest.skip("a one-node Slurm from a temp dir needs root (slurmd starts the tasks); run as root")
    if not os.path.exists(VOXSCALE):
        pytest.skip("%s is not built" % VOXSCALE)
    s = Slurm(str(tmp_path_factory.mktemp("slurm")))
    try:
        why = s.start()
        if why:
            pytest.skip(why)
        yield s
    finally:
        s.stop()


def train_args(out, steps, *extra):
    return [VOXSCALE, "train", "--config", TINY, "--device", "cpu", "--steps", steps, "--out", out,
            "--set", "train.global_batch=4", *QUIET, *extra]


def test_srun_two_ranks_train_the_one_rank_model(slurm, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    p = slurm.run(*train_args(one, 4))
    assert p.returncode == 0, p.stderr
    p = slurm.run("srun", "-n", 2, *train_args(two, 4))
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    assert "2 ranks (srun)" in p.stdout and "mpi communicator" in p.stdout, p.stdout[-3000:]
    assert len(re.findall(r"step +4/4", p.stdout)) == 1, "only rank 0 prints progress"
    assert_same_training(two, one, 4)


def wait_gone(slurm, job, timeout):
    t_end = time.time() + timeout
    while time.time() < t_end:
        if not slurm.run("squeue", "-h", "-j", job, timeout=10).stdout.strip():
            return
        time.sleep(0.5)
    pytest.fail("job %s still in the queue after %d s:\n%s" % (job, timeout, slurm.run("squeue").stdout))


def sbatch(slurm, tmp_path, out, steps, *args, wait=False):
    """examples/slurm/train.sbatch on the tiny config; returns (CompletedProcess, the job's output file)."""
    log = tmp_path / "job.out"
    p = slurm.run("sbatch", *(["--wait"] if wait else []), "--parsable", "--output", log, "--chdir", ROOT,
                  "--export", "ALL,VOXSCALE=%s,CONFIG=%s,OUT=%s,SRUN_MPI=%s" % (VOXSCALE, TINY, out, slurm.mpi),
                  SBATCH, "--device", "cpu", "--steps", steps, "--set", "train.global_batch=4", *QUIET, *args,
                  timeout=180)
    return p, log


def test_the_example_sbatch_script_trains_to_the_end(slurm, tmp_path):
    out = tmp_path / "run"
    p, log = sbatch(slurm, tmp_path, out, 4, wait=True)
    text = log.read_text() if log.exists() else ""
    assert p.returncode == 0, (p.stdout, p.stderr, text[-3000:])
    assert "2 ranks (srun)" in text and re.search(r"step +4/4", text), text[-3000:]
    assert (out / "checkpoints" / "step_4.ckpt").exists()


def test_scancel_stops_every_rank_with_a_checkpoint_that_resumes(slurm, tmp_path):
    out = tmp_path / "run"
    p, log = sbatch(slurm, tmp_path, out, 100000)
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip().split(";")[0]
    t_end = time.time() + 60
    while not (log.exists() and re.search(r"step +\d+/100000", log.read_text())):  # training, not still starting
        assert time.time() < t_end, "no step within 60 s:\n" + (log.read_text()[-3000:] if log.exists() else "")
        time.sleep(0.3)
    assert slurm.run("scancel", job).returncode == 0
    wait_gone(slurm, job, 40)
    text = log.read_text()
    for r in range(2):
        assert re.search(r"voxscale: rank %d/2 \(pid \d+ on \S+\): SIGTERM from srun" % r, text), text[-3000:]
    m = re.search(r"stopping on signal 15 \(SIGTERM\) after step (\d+)", text)
    assert m, text[-3000:]
    step = int(m.group(1))
    ckpt = out / "checkpoints" / ("step_%d.ckpt" % step)
    assert ckpt.exists(), (os.listdir(out / "checkpoints"), text[-3000:])
    assert "exit 3" not in text.replace("or exit 3 if", ""), "a rank ended without its checkpoint:\n" + text[-3000:]
    p = slurm.run(*train_args(tmp_path / "more", step + 1, "--resume", ckpt))
    assert p.returncode == 0, p.stderr
