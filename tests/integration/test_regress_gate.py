"""ci/regress's parent comparison (ci/regress_ab.py): it gates a machine it has never seen, and a deliberate 20%
slowdown of one kernel in a test build (`make VX_TEST_SLOW=20`: upconv_phase_shuffle, the decoder's upsampling
convolution's shuffle, redoes a fifth of its output) is
caught by the instruction counts, which the load of a shared VM does not move, while every other op counts the same
instructions to the one. Builds: this tree at -march=x86-64-v3 (what valgrind runs) into build-regress-v3, the
slowed copy by rebuilding only upconv_phase_cpu.o in a copy of it. About 3 minutes on 2 quiet cores."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGRESS = [os.path.join(ROOT, "ci", "regress")]


def run(args, **kw):
    return subprocess.run(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800,
                          **kw)


def rows(out):
    """{(kind, op): verdict} of the comparison's table"""
    got = {}
    for line in out.splitlines():
        w = line.split()
        if len(w) >= 4 and w[0] in ("time", "instructions") and w[-1] in ("ok", "REGRESSED"):
            got[(w[0], line[14:55].strip())] = w[-1]
    return got


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    if not shutil.which("valgrind"):
        pytest.fail("valgrind is missing: ci/deps.sh installs it")
    v3 = os.path.join(ROOT, "build-regress-v3")
    p = run(["make", "-j2", "CUDA=0", "ARCH=-march=x86-64-v3", "BUILD=" + v3, os.path.join(v3, "voxscale")])
    assert p.returncode == 0, p.stdout[-3000:]
    slow = str(tmp_path_factory.mktemp("slow") / "build")
    shutil.copytree(v3, slow, symlinks=True)
    os.remove(os.path.join(slow, "kernels", "upconv_phase", "upconv_phase_cpu.o"))
    p = run(["make", "-j2", "CUDA=0", "ARCH=-march=x86-64-v3", "BUILD=" + slow, "VX_TEST_SLOW=20",
             os.path.join(slow, "voxscale")])
    assert p.returncode == 0, p.stdout[-3000:]
    assert "-DVX_TEST_SLOW_PERCENT=20" in p.stdout and "upconv_phase_cpu.c" in p.stdout, p.stdout[-3000:]
    return os.path.join(v3, "voxscale"), os.path.join(slow, "voxscale")


def test_a_20_percent_slower_kernel_is_caught_by_its_instruction_count(builds):
    base, slow = builds
    p = run(REGRESS + ["--base-bin", base, "--new-bin", slow, "--pairs", "0", "--no-baseline",
                       "--count-config", "configs/test/tiny.json"])
    assert p.returncode == 1, p.stdout[-4000:]
    r = rows(p.stdout)
    assert r[("instructions", "upconv_phase_shuffle")] == "REGRESSED", p.stdout[-4000:]
    assert [k for k, v in r.items() if v == "REGRESSED"] == [("instructions", "upconv_phase_shuffle")], p.stdout[-4000:]
    # the convolutions on both CPU paths were counted, and matched the unchanged build exactly
    assert r[("instructions", "conv3d_forward [onednn]")] == "ok" and r[("instructions", "conv3d_forward [im2col]")] == "ok"
    assert "parent comparison: FAILED: 1 of" in p.stdout


def test_the_same_build_passes_and_a_cpu_without_a_baseline_is_gated_not_skipped(builds, tmp_path):
    base, _ = builds
    # three timing pairs on the tiny config as well (as the real gate runs: a regression must be slower in every pair,
    # and one pair is one noisy sample on a shared VM): the parts run, and nothing regresses against itself
    p = run(REGRESS + ["--base-bin", base, "--new-bin", base, "--pairs", "3", "--config", "configs/test/tiny.json",
                       "--budget-ms", "30", "--count-config", "configs/test/tiny.json",
                       "--baseline", str(tmp_path / "no-such-baseline.json")])
    assert p.returncode == 0, p.stdout[-4000:]
    assert "parent comparison: passed" in p.stdout
    assert "gated by the parent comparison alone" in p.stdout and "skipped" not in p.stdout
    r = rows(p.stdout)
    assert ("time", "upconv_phase_shuffle") in r and ("instructions", "upconv_phase_shuffle") in r
