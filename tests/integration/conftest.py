"""Shared helpers for the integration tests: they drive the real build/voxscale binary."""
import glob
import json
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The build the tests drive: BUILD (relative to the repo root, or absolute; default build) holds voxscale, the unit
# test binaries in tests/ and the test tools in tests/tools/ (ci/isa_sweep.sh points it at a build for another ISA
# level). VOXSCALE names another binary alone (ci/gpu.sh points it at the build it carried to a GPU machine; the
# sanitizer step at the ASan build), VX_TESTS another folder of test binaries.
BUILD = os.path.join(ROOT, os.environ.get("BUILD") or "build")
VOXSCALE = os.path.abspath(os.environ.get("VOXSCALE") or os.path.join(BUILD, "voxscale"))
TESTS = os.path.abspath(os.environ.get("VX_TESTS") or os.path.join(BUILD, "tests"))
TOOLS = os.path.join(BUILD, "tests", "tools")

# On pytest-xdist workers (ci/test.sh runs one per core) two tests' processes share the cores, and OpenMP's default
# wait (spin, then sleep) turns every barrier of a 2-thread run into a wait for a descheduled thread: on the 2-core CI
# VM vit3d-diffusion-tiny's training took 14 s alone and 219 s with a second one beside it (GOMP_SPINCOUNT 1000: 50 s),
# and 18 s beside it with passive waits. So the workers' runs, and the PyTorch references in the workers, wait
# passively (alone that run takes 46-54 s, the price of a wake-up from an idle vCPU; beside another it is the pair's
# 18). Set before anything starts an OpenMP runtime; a caller's own OMP_WAIT_POLICY stands.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")


@pytest.fixture(scope="session", autouse=True)
def conv_choices_of_this_session(tmp_path_factory):
    """The CPU convolutions' measured choices (kernels/conv3d/conv3d_cpu_select.c) in a file of this test session:
    every run of the session reuses them (so reruns meet the same kernels, as on a user's machine), and nothing
    measured here is left in the user's cache or read from it. VX_CONV_CACHE set by the caller wins."""
    if "VX_CONV_CACHE" not in os.environ:
        os.environ["VX_CONV_CACHE"] = str(tmp_path_factory.mktemp("conv-cache") / "conv-cpu.tsv")
    yield


def cpu_levels():
    """What the dispatch serves on this CPU as the binary sees it (kernels/common/cpu_isa.c): {"avx512": bool,
    "bf16": bool, "amx": bool, "cap": VX_CPU_ISA's level or None}, the CPU's own flags capped by VX_CPU_ISA and less
    what VX_CPU_HIDE hides. Tests that depend on an ISA feature ask this, not /proc/cpuinfo alone, so that
    ci/isa_sweep.sh's lower levels skip or expect what that level runs."""
    with open("/proc/cpuinfo") as f:
        flags = set(next(l for l in f if l.startswith("flags")).split(":", 1)[1].split())
    avx512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags
    have = {"avx512": avx512, "bf16": avx512 and "avx512_bf16" in flags, "amx": {"amx_bf16", "amx_tile"} <= flags}
    cap = os.environ.get("VX_CPU_ISA") or None
    if cap == "native":
        cap = None
    order = ["avx2", "avx512", "avx512_bf16", "amx"]
    if cap in order:
        level = order.index(cap)
        have["avx512"] &= level >= 1
        have["bf16"] &= level >= 2
        have["amx"] &= level >= 3
    hide = os.environ.get("VX_CPU_HIDE", "").split(",")
    have["bf16"] &= "avx512_bf16" not in hide
    have["amx"] &= "amx_bf16" not in hide
    have["cap"] = cap
    return have


def run(*args, check=True, timeout=600, env=None):
    """Runs voxscale with args from the repo root; returns the CompletedProcess (text)."""
    p = subprocess.run([VOXSCALE, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                       env=env)
    if check and p.returncode != 0:
        raise AssertionError("voxscale %s failed (%d):\n%s\n%s" % (" ".join(map(str, args)), p.returncode, p.stdout, p.stderr))
    return p


def rank_pids(marker, rank_var, rank):
    """Pids of voxscale processes whose command line holds marker (a run's own --out folder: never another test's or a
    user's run on the machine) and whose environment has rank_var=rank."""
    pids = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            cmd = open(d + "/cmdline", "rb").read().split(b"\0")
            env = open(d + "/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"voxscale") and marker.encode() in cmd and \
                ("%s=%d" % (rank_var, rank)).encode() in env:
            pids.append(int(d[6:]))
    return pids


# mpirun as the multi-rank tests start it: as root, more ranks than cores, without shared-memory single copies
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl_vader_single_copy_mechanism", "none"]
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None,
                                  reason="mpirun (openmpi-bin) is not installed; ci/deps.sh installs it")


def mpi(n, *args, check=True, timeout=180, env=None):
    """Runs voxscale on n MPI ranks from the repo root; returns the CompletedProcess (text)."""
    p = subprocess.run([*MPIRUN, "-np", str(n), VOXSCALE, *map(str, args)], cwd=ROOT, capture_output=True,
                       text=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError("mpirun -np %d voxscale %s failed (%d):\n%s\n%s" % (n, " ".join(map(str, args)),
                                                                                p.returncode, p.stdout[-3000:],
                                                                                p.stderr[-3000:]))
    return p


def metrics(run_dir):
    """The run's metrics.jsonl as a list of dicts."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session", autouse=True)
def built_binary():
    if not os.access(VOXSCALE, os.X_OK):
        pytest.fail("%s is missing: run `make` first (make test does)" % VOXSCALE)


def pytest_configure(config):
    config.addinivalue_line("markers", "host_only: a check of a GPU test file's own logic, run without a GPU too")
    config.addinivalue_line("markers", "timed: times the code and gates on it (bench kernels' and the regression "
                            "gate's tests): ci/test.sh runs these alone, after the others, with the cores to themselves")


# The files that take longest, slowest first (measured on the 2-core CI machines, 2026-12-03: 35-160 s each where the
# median file takes under 3 s). ci/test.sh spreads the files over pytest-xdist workers (--dist loadfile), which hand
# each worker the next file in collection order as it runs short of work: started first, these end beside the
# short files instead of alone at the end (test_zero.py last, alphabetically, left one worker idle for 2 minutes).
# Only the order changes, never what runs; a file not listed keeps its place after them.
SLOWEST_FILES = ["test_zero.py", "test_monai.py", "test_two_hosts.py", "test_report.py", "test_real_launchers.py",
                 "test_comm.py", "test_predict_diffusion.py", "test_vit3d_diffusion.py", "test_vit3d_cascade.py",
                 "test_memory_savers.py", "test_docs.py", "test_bench_scaling.py"]


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(os.path.basename(str(item.fspath)), len(rank)))  # stable: the rest in order


def pytest_report_header(config):
    """The CPU the binary dispatches for (its ISA level, VX_CPU_ISA's cap, the GEMM and convolution kernels): results
    that depend on the kernels' arithmetic are read against it (issue 41)."""
    try:
        p = subprocess.run([VOXSCALE, "detect", "--config", os.path.join("configs", "test", "tiny.json"),
                            "--device", "cpu"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "voxscale detect: %s" % e
    lines = [line for line in p.stdout.splitlines() if line.startswith("device:")]
    return "voxscale %s: %s" % (VOXSCALE, lines[0] if lines else "detect said: " + (p.stdout + p.stderr)[-300:])
