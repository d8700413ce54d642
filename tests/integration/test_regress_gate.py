"""ci/regress's parent comparison (ci/regress_ab.py): it gates a machine it has never seen, and a deliberate 20%
slowdown of one kernel in a test build (`make VX_TEST_SLOW=20`: upconv_phase_shuffle, the decoder's upsampling
convolution's shuffle, redoes a fifth of its output) is
caught by the instruction counts, which the load of a shared VM does not move, while every other op counts the same
instructions to the one. Builds: this tree at -march=x86-64-v3 (what valgrind runs) into build/isa-x86-64-v3 (the folder
ci/test.sh's CPU-only build and the ISA sweep's avx2 level use with the same flags: already built in CI), the
slowed copy by rebuilding only upconv_phase_cpu.o in a copy of it. About 2 minutes on 2 quiet cores."""
import os
import shutil
import subprocess
import sys
import types

import pytest

pytestmark = pytest.mark.timed  # its figures are timings: run alone (conftest.py, ci/test.sh)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGRESS = [os.path.join(ROOT, "ci", "regress")]


@pytest.fixture
def regress_ab():
    """ci/regress_ab.py as a module, for the tests that drive its gate with a stand-in for the timing or git"""
    sys.path.insert(0, os.path.join(ROOT, "ci"))
    import regress_ab as module
    return module


def run(args, **kw):
    return subprocess.run(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800,
                          **kw)


def rows(out):
    """{(kind, op): verdict} of the comparison's table"""
    got = {}
    for line in out.splitlines():
        w = line.split()
        if len(w) >= 4 and w[0] in ("time", "instructions") and w[-1] in ("ok", "REGRESSED", "accepted"):
            got[(w[0], line[14:55].strip())] = w[-1]
    return got


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    if not shutil.which("valgrind"):
        pytest.fail("valgrind is missing: ci/deps.sh installs it")
    v3 = os.path.join(ROOT, "build", "isa-x86-64-v3")
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
    # three timing pairs on the tiny config (as the real gate runs: a regression must be slower in every pair, and one
    # pair is one noisy sample on a shared VM): nothing regresses against itself. The instruction counts are left out
    # (--no-counts): the test above counts both builds, and every unchanged op there must count ok. Three ops, not the
    # whole table (--ops; the step is then not timed): the gate's own stage in ci/test.sh times every op and the step
    # of this tree against its parent, and the whole table here took 43 s of CI's pytest.
    p = run(REGRESS + ["--base-bin", base, "--new-bin", base, "--pairs", "3", "--config", "configs/test/tiny.json",
                       "--ops", "upconv_phase_shuffle,conv3d_forward,accumulate",
                       "--budget-ms", "30", "--no-counts", "--baseline", str(tmp_path / "no-such-baseline.json")])
    assert p.returncode == 0, p.stdout[-4000:]
    assert "parent comparison: passed" in p.stdout
    assert "gated by the parent comparison alone" in p.stdout and "skipped" not in p.stdout
    r = rows(p.stdout)
    assert {k for k in r} == {("time", "upconv_phase_shuffle"), ("time", "conv3d_forward"), ("time", "accumulate")}, \
        p.stdout[-4000:]


def test_a_figure_slower_in_every_pair_is_timed_again_before_it_is_called_a_regression(monkeypatch, regress_ab):
    """The time verdict's second round (regress_ab.gate), without timing anything: time_pairs is replaced by one that
    returns fixed ratios. A figure slower in every pair of the first round is timed again, alone (its op through
    --ops; the step only when the step is among them), and is a regression only when it is slower in every pair of
    both rounds; a figure slower in only some pairs of the first round is not timed again."""
    step = regress_ab.STEP
    calls = []

    def fake(new, base, config, pairs, ops, budget_ms, log, kernels=True, **kw):
        calls.append((ops, kernels, kw.get("step")))
        if len(calls) == 1:
            return {"gemm": [1.3, 1.2, 1.4], "relu_forward": [1.3, 1.2, 1.4], step: [1.2, 1.3, 1.25],
                    "adamw": [1.3, 1.1, 1.3]}
        return {"gemm": [1.3, 1.25, 1.2], "relu_forward": [1.3, 0.95, 1.2], step: [1.0, 1.02, 0.98]}

    monkeypatch.setattr(regress_ab, "time_pairs", fake)
    args = types.SimpleNamespace(base_bin="base", new_bin="new", pairs=3, config="c.json", ops=None, budget_ms=30,
                                 count_configs=[])
    out = []
    bad, n = regress_ab.gate(args, log=out.append)
    assert calls == [(None, True, None), ("gemm,relu_forward", True, True)], calls
    r = rows("\n".join(out))
    assert bad == 1 and r[("time", "gemm")] == "REGRESSED", out
    assert r[("time", "relu_forward")] == r[("time", step)] == r[("time", "adamw")] == "ok", out
    assert any("1.30 1.20 1.40 1.30 1.25 1.20" in line for line in out), out


def test_a_slowdown_named_in_the_commit_message_is_accepted_and_only_that_one(monkeypatch, regress_ab):
    """`Regress-accepted: KIND OP` lines in HEAD's message (ci/regress_ab.parse_accepted) turn that figure's
    REGRESSED into accepted and leave every other regression failing; only HEAD against its parent reads them."""
    msg = ("GELU: a select before the tail's product\n\nWhy ...\n\nRegress-accepted: instructions gelu_backward\n"
           "Regress-accepted: instructions conv3d_forward [onednn]\nRegress-accepted: bogus x\n")
    assert regress_ab.parse_accepted(msg) == {("instructions", "gelu_backward"),
                                              ("instructions", "conv3d_forward [onednn]")}
    monkeypatch.setattr(regress_ab, "git", lambda *a: msg if a[:2] == ("log", "-1") else None)
    assert regress_ab.head_accepted("HEAD against its parent") == regress_ab.parse_accepted(msg)
    assert regress_ab.head_accepted("the working tree's changes against HEAD") == set()
    monkeypatch.setattr(regress_ab, "time_pairs", lambda *a, **kw: {"gemm": [1.3, 1.3, 1.3]})
    args = types.SimpleNamespace(base_bin="base", new_bin="new", pairs=3, config="c.json", ops=None, budget_ms=30,
                                 count_configs=[], accepted={("time", "gemm")})
    out = []
    assert regress_ab.gate(args, log=out.append) == (0, 1), out
    assert rows("\n".join(out)) == {("time", "gemm"): "accepted"}, out
    args.accepted = {("instructions", "gemm")}  # another kind: not this figure
    out = []
    assert regress_ab.gate(args, log=out.append) == (1, 1), out
    assert rows("\n".join(out)) == {("time", "gemm"): "REGRESSED"}, out
