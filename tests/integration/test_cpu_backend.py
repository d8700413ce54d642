"""The CPU backend on the running CPU (issue 22): the device: line names the CPU's instruction set, the GEMM kernels
and the convolutions' paths; an OpenBLAS whose kernels are older than the CPU is said there and its GEMMs go to
oneDNN's sgemm; the convolutions are chosen per shape and direction by measurement, printed with VX_CONV_LOG=1 and
kept in the VX_CONV_CACHE file; training through oneDNN matches the im2col reference to float rounding; and
--deterministic reruns are bit for bit, forced onto either path or as chosen (the choice read back from the file);
the ranks of a run convolve with rank 0's choices, so a fresh multi-rank run trains what its rerun trains."""
import filecmp
import os
import re
import subprocess

import pytest

import conftest
from conftest import cpu_levels, metrics, mpi, needs_mpirun, run

TINY = ["--config", "configs/test/tiny.json", "--device", "cpu", "--set", "output.tensorboard=0",
        "--set", "train.val_samples=0"]


def flags():
    with open("/proc/cpuinfo") as f:
        line = next(l for l in f if l.startswith("flags"))
    return set(line.split(":", 1)[1].split())


def device_line(out):
    return next(l for l in out.splitlines() if l.startswith("device: "))


def test_device_line_names_the_isa_the_gemm_kernels_and_the_convolutions():
    line = device_line(run("detect", *TINY).stdout)
    f, levels = flags(), cpu_levels()  # the CPU's own, and as VX_CPU_ISA caps it (ci/isa_sweep.sh)
    isa = "AVX-512" if levels["avx512"] else "AVX2" if "avx2" in f else None
    if isa:
        assert ", %s" % isa in line, line
    assert ("AVX512-BF16" in line.split("GEMM:")[0].split(" (VX_CPU_ISA=")[0]) == levels["bf16"], line
    if levels["cap"]:
        assert "(VX_CPU_ISA=%s on a CPU with " % levels["cap"] in line, line
    assert re.search(r"GEMM: (OpenBLAS [0-9.]+, \w+ kernels|oneDNN [0-9.]+ sgemm)", line), line
    # detect plans and measures nothing: the choice is made at each shape's first call
    assert re.search(r"convolutions: oneDNN [0-9.]+ \(\w+\) or im2col\+sgemm per shape and direction, the faster "
                     r"measured at its first call", line), line


def test_an_openblas_older_than_the_cpu_is_said_and_its_gemms_go_to_onednn():
    # OpenBLAS's SSE kernels are what 0.3.21 runs on a CPU it does not know (Emerald Rapids); forcing them here
    # stands in for that machine
    p = run("detect", *TINY, env=dict(os.environ, OPENBLAS_CORETYPE="Prescott"))
    line = device_line(p.stdout)
    if "AVX" not in line.split("GEMM:")[0]:
        pytest.skip("this CPU has no AVX: SSE kernels match it")
    assert "GEMM: oneDNN" in line and "Prescott kernels (SSE) are older than this" in line, line
    # and a forced GEMM says it was forced
    line = device_line(run("detect", *TINY, env=dict(os.environ, VX_GEMM="onednn")).stdout)
    assert "sgemm" in line and "VX_GEMM=onednn" in line, line


def test_where_onednn_runs_amx_the_gemms_go_to_its_sgemm_and_the_line_says_why():
    """AMX Xeons: oneDNN's sgemm was measured faster than OpenBLAS's SkylakeX kernels (kernels/common/cpu_gemm.h),
    so it is chosen although OpenBLAS's kernels match the CPU's width; with AMX hidden (or capped away) the old rule
    holds again, so the choice follows AMX and nothing else."""
    if not cpu_levels()["amx"]:
        pytest.skip("this CPU (or its VX_CPU_ISA cap) has no AMX: the GEMM rule for AMX does not apply")
    line = device_line(run("detect", *TINY).stdout)
    assert "GEMM: oneDNN" in line and "sgemm (avx512_core_amx)" in line, line
    assert re.search(r"measured faster than OpenBLAS [0-9.]+'s \w+ kernels on AMX Xeons", line), line
    hidden = device_line(run("detect", *TINY, env=dict(os.environ, VX_CPU_HIDE="amx_bf16")).stdout)
    # without AMX: OpenBLAS where its kernels are the CPU's width, else oneDNN for that older reason
    assert "on AMX Xeons" not in hidden, hidden
    assert "GEMM: OpenBLAS" in hidden or "are older than this" in hidden, hidden


def test_conv_log_shows_each_choice_with_both_times_and_the_file_keeps_them(tmp_path):
    cache = tmp_path / "conv.tsv"
    env = dict(os.environ, VX_CONV_LOG="1", VX_CONV_CACHE=str(cache))
    # planning alone measures nothing (detect, or the hardware plan trying batch sizes)
    planned = run("detect", *TINY, env=env).stderr
    assert not [l for l in planned.splitlines() if l.startswith("conv3d cpu ")] and not cache.exists(), planned
    first = run("train", *TINY, "--steps", 1, "--out", tmp_path / "a", env=env).stderr
    lines = [l for l in first.splitlines() if l.startswith("conv3d cpu ")]
    # every distinct shape of the tiny model, three directions each, measured at the first step
    assert lines and len(lines) % 3 == 0, first
    assert all("measured now" in l and re.search(r"im2col [0-9.]+ ms, oneDNN [0-9.]+ ms", l) for l in lines), first
    assert any("oneDNN " in l.split(": ", 1)[1] for l in lines) or all("im2col+sgemm" in l for l in lines)
    assert len(cache.read_text().splitlines()) == len(lines)
    again = run("train", *TINY, "--steps", 1, "--out", tmp_path / "b", env=env).stderr
    relines = [l for l in again.splitlines() if l.startswith("conv3d cpu ")]
    assert len(relines) == len(lines) and all("measured earlier" in l for l in relines), again
    # the same choices
    strip = lambda l: l.split(" (im2col")[0].split(", measured")[0]
    assert sorted(map(strip, lines)) == sorted(map(strip, relines))


def test_a_bad_vx_conv_cpu_is_one_line_and_exit_2():
    p = run("detect", *TINY, check=False, env=dict(os.environ, VX_CONV_CPU="fast"))
    assert p.returncode == 2 and "VX_CONV_CPU must be auto, im2col or onednn" in p.stderr, p.stderr


def _train(out, env, steps=4, threads=2):
    return run("train", *TINY, "--steps", steps, "--threads", threads, "--deterministic", "--out", out,
               "--set", "train.log_every=1", env=dict(os.environ, **env))


def test_onednn_training_matches_the_im2col_reference_to_float_rounding(tmp_path):
    losses = {}
    for path in ("im2col", "onednn"):
        _train(tmp_path / path, {"VX_CONV_CPU": path}, threads=2)
        losses[path] = [m["loss"] for m in metrics(tmp_path / path) if "loss" in m]
    assert len(losses["im2col"]) == 4
    for a, b in zip(losses["im2col"], losses["onednn"]):
        assert abs(a - b) <= 1e-4 * abs(a), losses
    # two paths really ran: their sums round differently, which the trained weights show (the 4 losses alone can
    # agree to all 9 printed digits: they did at AVX2 once the decoder's upsampling became a phase convolution)
    ckpt = lambda path: (tmp_path / path / "checkpoints" / "step_4.ckpt").read_bytes()
    assert ckpt("im2col") != ckpt("onednn")


@pytest.mark.parametrize("path", ["onednn", "auto"])
def test_deterministic_reruns_are_bit_for_bit(tmp_path, path):
    # fixed threads (2), the choices of the first run read back from the file by the second, oneDNN's kernels
    # deterministic for a fixed thread count and ISA
    env = {"VX_CONV_CPU": path, "VX_CONV_CACHE": str(tmp_path / "conv.tsv")}
    for r in ("a", "b"):
        _train(tmp_path / r, env)
    ca, cb = (os.path.join(tmp_path, r, "checkpoints", "step_4.ckpt") for r in "ab")
    assert filecmp.cmp(ca, cb, shallow=False)
    assert [m.get("loss") for m in metrics(tmp_path / "a")] == [m.get("loss") for m in metrics(tmp_path / "b")]


def per_rank_stderr(logs, *args, env):
    """2 MPI ranks' stderr, rank after rank, each from its own file (mpirun --output-filename): through mpirun's
    merged stream the two ranks' lines could interleave mid-line (one CI run split a log line in two)."""
    p = subprocess.run([*conftest.MPIRUN, "--output-filename", str(logs), "-np", "2", conftest.VOXSCALE,
                        *map(str, args)], cwd=conftest.ROOT, capture_output=True, text=True, timeout=180, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return "".join(open(os.path.join(logs, "1", "rank.%d" % r, "stderr")).read() for r in range(2))


@needs_mpirun
def test_every_rank_runs_rank_0s_convolution_choices_and_a_fresh_run_equals_its_rerun(tmp_path):
    # Ranks that each timed the two paths at once chose differently where the two were close (two resnet3d-18
    # shapes on a 2-core Xeon), and the file kept whichever line came last: a fresh 2-rank run then trained other
    # losses than every rerun of it. Rank 0 alone chooses now; the others take its choices before the first step.
    cache = tmp_path / "conv.tsv"
    env = dict(os.environ, VX_CONV_LOG="1", VX_CONV_CACHE=str(cache))
    args = ["train", *TINY, "--steps", 3, "--threads", 1, "--set", "train.log_every=1"]
    fresh = per_rank_stderr(tmp_path / "logs-a", *args, "--out", tmp_path / "a", env=env)
    lines = [l for l in fresh.splitlines() if l.startswith("conv3d cpu ")]
    measured = [l for l in lines if l.endswith(", measured now")]
    adopted = [l for l in lines if l.endswith(", chosen by rank 0")]
    assert measured and len(measured) % 3 == 0 and len(adopted) == len(measured) == len(lines) / 2, fresh
    choice = lambda l: l.split(": ", 1)[1].split(" (im2col")[0].split(", ")[0]  # the path and oneDNN's kernel
    shape = lambda l: l.split(", 1 threads")[0]
    assert {shape(l): choice(l) for l in measured} == {shape(l): choice(l) for l in adopted}
    assert len(cache.read_text().splitlines()) == len(measured)  # rank 0's lines only
    again = per_rank_stderr(tmp_path / "logs-b", *args, "--out", tmp_path / "b", env=env)
    relines = [l for l in again.splitlines() if l.startswith("conv3d cpu ")]
    assert sum(l.endswith(", measured earlier") for l in relines) == len(measured), again
    loss = lambda r: [m["loss"] for m in metrics(tmp_path / r) if "loss" in m]
    assert len(loss("a")) == 3 and loss("a") == loss("b")


def arena_mib(out):
    return float(re.search(r"memory: arena ([0-9.]+) MiB planned", out).group(1))


def test_a_onednn_kernel_with_a_ballooning_scratchpad_is_no_candidate_and_the_plan_stays_near_the_reference():
    # oneDNN 2.6.3's backward-weights scratchpad for resnet3d-18's 1x1x1 512 -> 512 3^3 shape grows with the threads
    # (270 MiB at 2, where im2col needs 28), and the plan reserves the largest candidate's workspace before anything
    # is measured: the CPU arena was 303 MiB for the reference's 61, for a kernel that then lost to im2col anyway.
    args = ["detect", "--config", "configs/resnet3d-18-cls.json", "--device", "cpu", "--threads", 2]
    ref = arena_mib(run(*args, env=dict(os.environ, VX_CONV_CPU="im2col")).stdout)
    auto = arena_mib(run(*args).stdout)
    assert auto <= 1.25 * ref, (auto, ref)


@needs_mpirun
@pytest.mark.parametrize("forced_rank", [0, 1])
def test_a_rank_whose_vx_conv_cpu_forces_a_path_still_meets_rank_0s_broadcast(tmp_path, forced_rank):
    # VX_CONV_CPU is per process (mpirun -x): a rank that left the choices' broadcast out met rank 0's broadcast with
    # its next collective (the parameters') instead
    args = ["train", *TINY, "--steps", 2, "--threads", 1, "--set", "train.log_every=1", "--out", tmp_path / "run"]
    cmd = list(conftest.MPIRUN)
    for r in range(2):
        cmd += ([":"] if r else []) + ["-np", "1"] + (["-x", "VX_CONV_CPU=im2col"] if r == forced_rank else [])
        cmd += [conftest.VOXSCALE, *map(str, args)]
    p = subprocess.run(cmd, cwd=conftest.ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert [m["step"] for m in metrics(tmp_path / "run") if "loss" in m] == [1, 2]
