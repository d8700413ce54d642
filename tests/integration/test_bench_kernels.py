"""`voxscale bench kernels` and the regression gate ci/regress, on the CPU backend.

bench kernels must check every op of the default config against its float64 reference (and fail, naming the op,
when an output is wrong), rate each against ceilings measured in the same run, and write its JSON and Markdown;
ci/regress's baseline part (--no-parent: the parent comparison has tests/integration/test_regress_gate.py) must pass
a fresh run against a baseline made on this machine, fail when one op is made 3x slower, and say "skipped" (exit 77)
where there is neither a parent nor a baseline. About a minute on 2 cores."""
import json
import re
import os
import subprocess

import pytest

pytestmark = pytest.mark.timed  # its figures are timings: run alone (conftest.py, ci/test.sh)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, os.environ.get("BUILD", "build"), "voxscale")
REGRESS = [os.path.join(ROOT, "ci", "regress"), "--no-parent"]
GATE_OPS = "conv3d_forward,groupnorm_silu_forward,accumulate"


def run(args, env=None, **kw):
    e = dict(os.environ, **(env or {}))
    return subprocess.run(args, cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300, **kw)


def report(results, stem="default"):
    [device] = os.listdir(results)
    with open(os.path.join(results, device, "kernels_%s.json" % stem)) as f:
        j = json.load(f)
    with open(os.path.join(results, device, "kernels_%s.md" % stem)) as f:
        return j, f.read()


def test_every_op_checked_and_rated(tmp_path):
    p = run([BIN, "bench", "kernels", "--device", "cpu", "--budget-ms", "10", "--reps", "20",
             "--results", str(tmp_path)])
    assert p.returncode == 0, p.stdout[-3000:]
    j, md = report(str(tmp_path))
    ops = {k["op"] for k in j["kernels"]}
    # every op of the table that the default model calls (GroupNorm fused with SiLU, the ResBlocks' residual add
    # fused into a convolution, whose backward accumulates the skip's gradient, the decoder's upsampling convolution
    # as one phase convolution with its weights, fold and shuffles), forward and backward, and the optimizer
    assert ops == {"conv3d_forward", "conv3d_forward_add", "conv3d_backward_data", "conv3d_backward_filter",
                   "groupnorm_silu_forward", "groupnorm_silu_backward", "upconv_phase_weights", "upconv_phase_fold",
                   "upconv_phase_shuffle", "upconv_phase_unshuffle",
                   "accumulate", "recon_loss_l1", "latent_forward", "latent_backward", "adamw", "sumsq"}
    assert j["failed_checks"] == 0
    assert j["ceilings"]["gemm_gflops"] > 1 and j["ceilings"]["copy_gbps"] > 0.5
    for k in j["kernels"]:
        assert k["check"] == "ok" and k["error"] <= k["tolerance"], k
        assert k["reps"] >= 5 and 0 < k["min_us"] <= k["median_us"] <= k["p90_us"], k
        rate = k["gflops"] if k["bound"] == "compute" else k["gbps"]
        assert rate > 0 and k["fraction_of_ceiling"] > 0, k
        assert k["fraction_of_ceiling_best"] >= k["fraction_of_ceiling"], k
    convs = [k for k in j["kernels"] if k["op"] == "conv3d_forward"]
    assert len({k["shape"] for k in convs}) == len(convs) >= 4  # one row per distinct shape
    assert "| conv3d_forward | n2 32x32x32 c1->16 k3 s1 | ok" in md
    assert "Ceilings measured in the same run" in md


def attention_rows(j):
    return {(k["op"], k["shape"]): k for k in j["kernels"] if k["op"].startswith("attention")}


def test_attention_rows_at_the_reference_shapes(tmp_path):
    # issue 21: a vit3d config's run has attention at 512 and 4096 tokens (self-attention, batch 1, one head, d 64)
    # besides the model's own shape, checked first (sampled rows against float64 at the timed shape), rated in
    # GFLOP/s at FlashAttention's count against the GEMM ceiling. (32768 is --attention-tokens 512,4096,32768:
    # minutes on 2 cores, left to the measured run.) About 15 s here.
    p = run([BIN, "bench", "kernels", "--config", "configs/test/vit3d-tiny.json", "--ops",
             "attention_forward,attention_backward", "--budget-ms", "10", "--reps", "5", "--results", str(tmp_path)])
    assert p.returncode == 0, p.stdout[-3000:]
    j, md = report(str(tmp_path), "vit3d-tiny")
    rows = attention_rows(j)
    assert {op for op, _ in rows} == {"attention_forward", "attention_backward"}
    assert len(rows) == len(j["kernels"]) == 6, sorted(rows)  # the model's own shape, 512, 4096; nothing else
    for t in (512, 4096):
        shape = "b1 h1 %dx%d d64" % (t, t)
        fwd, bwd = rows[("attention_forward", shape)], rows[("attention_backward", shape)]
        assert fwd["flops"] == 4 * t * t * 64 and bwd["flops"] == 2.5 * fwd["flops"], (fwd, bwd)
        for k in (fwd, bwd):
            assert k["bound"] == "compute" and k["check"] == "ok" and k["error"] <= k["tolerance"] <= 1e-5, k
            assert k["reps"] >= 5 and 0 < k["min_us"] <= k["median_us"] <= k["p90_us"], k
            # sane: above a GFLOP/s, below the ceiling's 1.5x (a miscount by 2x or 64x would show)
            assert 1 < k["gflops"] and 0 < k["fraction_of_ceiling"] < 1.5, k
        assert "| attention_forward | %s | ok" % shape in md
    assert 0 < j["peak_rss_mib"] < 2048, j["peak_rss_mib"]
    assert "FlashAttention's FLOPs" in md

    # --attention-tokens sets the list for any model: the default config calls no attention, and gets only these
    q = run([BIN, "bench", "kernels", "--ops", "attention_forward,attention_backward,sumsq", "--attention-tokens",
             "96", "--budget-ms", "5", "--reps", "5", "--results", str(tmp_path / "any")])
    assert q.returncode == 0, q.stdout[-3000:]
    j, _ = report(str(tmp_path / "any"))
    assert {(k["op"], k["shape"]) for k in j["kernels"] if k["op"] != "sumsq"} == {
        ("attention_forward", "b1 h1 96x96 d64"), ("attention_backward", "b1 h1 96x96 d64")}


def test_attention_step_is_the_models_pair_through_the_saved_probabilities(tmp_path):
    # attention_forward and _backward pass no saved memory (the backward recomputes the scores); attention_step runs
    # the pair as a model does. The CPU saves P while one tile of keys (<= 1024) fits: at 512 tokens the step does
    # four backward products (12 tq tk d in all), at 4096 it saves nothing and recomputes (14). Checked against
    # float64 like the others; a backward that read a P the forward had not written failed test_backend_ops.
    p = run([BIN, "bench", "kernels", "--config", "configs/test/vit3d-tiny.json", "--ops", "attention_step",
             "--budget-ms", "10", "--reps", "5", "--results", str(tmp_path)])
    assert p.returncode == 0, p.stdout[-3000:]
    j, md = report(str(tmp_path), "vit3d-tiny")
    rows = attention_rows(j)
    assert {op for op, _ in rows} == {"attention_step"} and len(rows) == 3, sorted(rows)
    for t, per_pair in ((512, 12), (4096, 14)):
        k = rows[("attention_step", "b1 h1 %dx%d d64" % (t, t))]
        assert k["flops"] == per_pair * t * t * 64, k
        assert k["bound"] == "compute" and k["check"] == "ok" and k["error"] <= k["tolerance"] <= 1e-5, k
        assert 1 < k["gflops"] and 0 < k["fraction_of_ceiling"] < 1.5, k
    assert "attention_step: the forward and the backward as a model calls them" in md


def test_a_wrong_output_fails_the_check_and_names_the_op(tmp_path):
    # the unfused model (train.fuse=0) has separate SiLU ops
    p = run([BIN, "bench", "kernels", "--device", "cpu", "--ops", "silu_backward,sumsq", "--budget-ms", "5",
             "--set", "train.fuse=0", "--results", str(tmp_path)], env={"VX_TEST_WRONG_OP": "silu_backward"})
    assert p.returncode == 1, p.stdout[-2000:]
    assert "silu_backward check FAILED: output 2 element 0" in p.stdout
    assert "op check" in p.stdout and "failed" in p.stdout
    j, md = report(str(tmp_path))
    verdicts = {(k["op"], k["check"]) for k in j["kernels"]}
    assert ("silu_backward", "FAILED") in verdicts and ("sumsq", "ok") in verdicts
    assert ("silu_backward", "ok") not in verdicts
    assert "**FAILED**" in md


def test_bad_flags_are_one_line_and_exit_2():
    for args, words in [(["--ops", "conv3d_sideways"], "not an op; choose from conv3d_forward"),
                        (["--budget-ms", "fast"], "--budget-ms fast: expected a whole number"),
                        (["--iters", "3"], "option --iters is not one of this command's"),
                        (["--attention-tokens", "512,4k"], "--attention-tokens 512,4k: expected up to 8 token counts"),
                        (["--attention-tokens", "0,512"], "or 0 for none")]:
        p = run([BIN, "bench", "kernels"] + args)
        assert p.returncode == 2, (args, p.stdout)
        lines = p.stdout.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (args, p.stdout)


def measure_gate_baseline(path):
    # the median of 3 runs, as the committed baselines are: one run's figure at a 60 ms budget can be an outlier
    # (a single-run baseline's conv3d_forward stood 39% above two later runs in one CI run)
    p = run(REGRESS + ["--update", "--runs", "3", "--ops", GATE_OPS, "--budget-ms", "60", "--device", "cpu",
                       "--baseline", path])
    assert p.returncode == 0, p.stdout[-3000:]
    with open(path) as f:
        b = json.load(f)
    assert set(b["figures"]) == set(GATE_OPS.split(",")) | {"step default"}
    assert all(t < 0.5 for t in b["tolerance"].values())  # halving a figure must always fail
    return path


@pytest.fixture(scope="module")
def gate_baseline(tmp_path_factory):
    return measure_gate_baseline(str(tmp_path_factory.mktemp("gate") / "baseline.json"))


def skip_if_the_machine_moved(out):
    """The gate compares fractions of ceilings measured in the same run; on this VM the memory copy ceiling itself has
    jumped between modes (43 vs 78 GB/s, minutes apart, nothing else running), and the small memory-bound ops did not
    follow it, so their fractions moved by -43% with no code changed. When a ceiling moved beyond ci/regress's
    HOST_SPREAD between the fixture's baseline and this run, the figures cannot be judged against it: skip, naming
    the ceilings (in CI the gate runs with its parent comparison, which such a move does not touch)."""
    m = re.search(r"ceilings now: GEMM ([\d.]+) GFLOP/s, copy ([\d.]+) GB/s \(baseline ([\d.]+), ([\d.]+)\)", out)
    if not m:
        return
    gemm, copy, bgemm, bcopy = map(float, m.groups())
    moved = max(gemm / bgemm, bgemm / gemm, copy / bcopy, bcopy / copy)
    if moved > 1.5:
        pytest.skip("this machine's ceilings moved x%.2f between the baseline and this run (GEMM %.1f vs %.1f "
                    "GFLOP/s, copy %.1f vs %.1f GB/s): its fractions cannot be judged" % (moved, gemm, bgemm, copy,
                                                                                         bcopy))


def test_gate_passes_a_fresh_run_on_the_same_machine(gate_baseline, tmp_path):
    # --attempts 3 (ci/test.sh's gate runs 2, at 150 ms per op rather than 60): a burst of a neighbour's load on the
    # shared VM has halved one op's figure for one run (seen once in this test); a real regression fails every run
    # (the next test)
    gate = REGRESS + ["--ops", GATE_OPS, "--budget-ms", "60", "--device", "cpu", "--attempts", "3", "--baseline"]
    p = run(gate + [gate_baseline])
    if p.returncode != 0:
        skip_if_the_machine_moved(p.stdout)
        # A CI VM (AVX-512 EPYC) once moved one op alone between the baseline and this test, a minute apart: the
        # fused groupnorm_silu_forward (compute-limited here, at a quarter of the copy ceiling it is rated against)
        # stood at 0.47 of its ceiling (the median of the 3 baseline runs) and at 0.25 in all 3 runs after, with both
        # ceilings unchanged (GEMM 469 -> 476 GFLOP/s, copy 80.6 -> 79.7 GB/s; what slows one op and not a memcpy on
        # a shared host, a busy sibling hyperthread or a clock change, cannot be seen from inside the VM). Such a mode
        # lasted, so the baseline is measured again, now, and the fresh run must pass against that one; a real
        # regression in the code would fail both.
        first = p.stdout
        p = run(gate + [measure_gate_baseline(str(tmp_path / "baseline.json"))])
        assert p.returncode == 0, first[-3000:] + "\n-- against a baseline measured again:\n" + p.stdout[-3000:]
    assert p.returncode == 0, p.stdout[-3000:]
    assert "ci/regress: passed: 4 figures within their tolerances" in p.stdout


def test_gate_fails_when_one_kernel_is_3x_slower(gate_baseline):
    # with the second run ci/test.sh allows: a slowdown that stays fails at its best run too
    p = run(REGRESS + ["--ops", GATE_OPS, "--budget-ms", "60", "--device", "cpu", "--baseline", gate_baseline,
                       "--attempts", "2"],
            env={"VX_TEST_SLOW_OP": "groupnorm_silu_forward:3"})
    if p.returncode != 1 or "FAILED: 1 of 4 figures regressed" not in p.stdout:
        skip_if_the_machine_moved(p.stdout)
    assert p.returncode == 1, p.stdout[-3000:]
    assert "run 2 of at most 2" in p.stdout and "best of 2 runs" in p.stdout, p.stdout[-3000:]
    rows = {line.split()[0]: line for line in p.stdout.splitlines() if line.endswith(("ok", "REGRESSED"))}
    assert rows["groupnorm_silu_forward"].endswith("REGRESSED"), p.stdout
    assert rows["conv3d_forward"].endswith("ok") and rows["accumulate"].endswith("ok"), p.stdout
    assert "FAILED: 1 of 4 figures regressed" in p.stdout


def test_gate_without_a_parent_or_a_baseline_says_skipped(tmp_path):
    k, s = tmp_path / "k.json", tmp_path / "s.json"
    k.write_text(json.dumps({"device": "gpu-nobody-has", "device_detail": "", "config": "default", "commit": "x",
                             "ceilings": {"gemm_gflops": 1, "copy_gbps": 1}, "kernels": []}))
    s.write_text(json.dumps({"config": "default", "fraction_of_ceiling": 0.5, "step_ms_median": 2,
                             "step_ms_min": 1}))
    p = run(REGRESS + ["--kernels", str(k), "--step", str(s)])
    assert p.returncode == 77, p.stdout
    assert "skipped: no parent to compare with and no baseline for this device (gpu-nobody-has)" in p.stdout
    assert "ci/regress --update" in p.stdout
