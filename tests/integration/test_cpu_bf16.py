"""bf16 on the CPU (issue 22, item 3): `--amp bf16 --device cpu` on a CPU with AVX512-BF16 or AMX-BF16 runs the
convolutions in bf16 math (oneDNN's bf16 kernels, float32 accumulation and outputs) on float32 storage, with float32
master weights, gradients and AdamW state; elsewhere it is refused in one line with exit 2.

- training follows float32 within bf16's rounding, and really is bf16 (its losses differ from float32's);
- --deterministic reruns are bit for bit, bf16 forced and as chosen (the choice read back from the file);
- a bf16 run's checkpoint resumes to the uninterrupted run's bytes, and config.json records train.precision bf16;
- the device, plan and precision lines say bf16 math and which kernels;
- VX_CPU_HIDE (tests only) hides the CPU's BF16 features: the refusal then runs on this machine too.
The convolution directions themselves are held to the float64 spec in test_backend_ops (its *_onednn_bf16 tests).
"""
import filecmp
import json
import os

import pytest

from conftest import cpu_levels, metrics, run

TINY = ["--config", "configs/test/tiny.json", "--device", "cpu", "--set", "output.tensorboard=0",
        "--set", "train.val_samples=0", "--set", "train.log_every=1"]
HIDE = {"VX_CPU_HIDE": "avx512_bf16,amx_bf16"}


def cpu_has_bf16():
    """AVX512-BF16 or AMX-BF16 at the level the dispatch serves (VX_CPU_ISA may hold it below them)"""
    levels = cpu_levels()
    return levels["bf16"] or levels["amx"]


needs_bf16 = pytest.mark.skipif(not cpu_has_bf16(), reason="this CPU (at its dispatched ISA level) has neither "
                                "AVX512-BF16 nor AMX-BF16")

# bf16 rounds the convolutions' inputs to 8 significant bits: over 8 steps of the tiny model the losses stay within
# 2% of float32's (seen: at most 0.63% here); float32 paths agree to 1e-4 (test_cpu_backend), so a 2% bound cannot
# hide a wrong gradient, which moves the loss by far more within a few steps at lr 3e-3
LOSS_RTOL = 2e-2


def train(out, *extra, steps=8, env=None, check=True):
    return run("train", *TINY, "--steps", steps, "--threads", 2, "--deterministic", "--out", out, *extra,
               env=dict(os.environ, **(env or {})), check=check)


def losses(out):
    return [m["loss"] for m in metrics(out) if "loss" in m]


@needs_bf16
def test_bf16_training_follows_float32_within_bf16_rounding(tmp_path):
    got = {}
    for amp in ("off", "bf16"):
        p = train(tmp_path / amp, "--amp", amp, env={"VX_CONV_CPU": "onednn"})
        got[amp] = losses(tmp_path / amp)
        if amp == "bf16":
            assert "precision: bf16 math in the convolutions on the CPU" in p.stdout, p.stdout
    assert len(got["off"]) == len(got["bf16"]) == 8
    worst = max(abs(a - b) / abs(a) for a, b in zip(got["off"], got["bf16"]))
    assert worst <= LOSS_RTOL, got
    assert got["off"] != got["bf16"]  # bf16 really ran: its rounding moves the losses
    assert got["bf16"][-1] < got["bf16"][0]  # and it trains


@needs_bf16
def test_the_lines_say_bf16_math_and_the_kernels(tmp_path):
    p = run("detect", *TINY, "--amp", "bf16")
    line = next(l for l in p.stdout.splitlines() if l.startswith("device: "))
    assert "AVX512-BF16" in line or "AMX-BF16" in line, line
    assert "; bf16 math " in line and "kernels: bf16 inputs, float32 accumulation and outputs" in line, line
    assert "avx512_core_bf16" in line or "avx512_core_amx" in line, line
    plan = next(l for l in p.stdout.splitlines() if l.startswith("plan: "))
    assert "bf16 math in the CPU's convolutions, float32 storage" in plan, plan
    # float32 says nothing of bf16
    off = run("detect", *TINY, "--amp", "off").stdout
    assert "bf16 math" not in off, off


@needs_bf16
@pytest.mark.parametrize("path", ["onednn", "auto"])
def test_deterministic_bf16_reruns_are_bit_for_bit(tmp_path, path):
    env = {"VX_CONV_CPU": path, "VX_CONV_CACHE": str(tmp_path / "conv.tsv")}
    for r in ("a", "b"):
        train(tmp_path / r, "--amp", "bf16", steps=4, env=env)
    ca, cb = (os.path.join(tmp_path, r, "checkpoints", "step_4.ckpt") for r in "ab")
    assert filecmp.cmp(ca, cb, shallow=False)
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    if path == "auto":  # the second run read the choices, bf16 ones among them, from the file
        assert " bf16\t" in (tmp_path / "conv.tsv").read_text()


@needs_bf16
def test_a_bf16_checkpoint_resumes_to_the_uninterrupted_run(tmp_path):
    env = {"VX_CONV_CPU": "onednn"}
    whole, part, resumed = tmp_path / "whole", tmp_path / "part", tmp_path / "resumed"
    train(whole, "--amp", "bf16", env=env)
    train(part, "--amp", "bf16", "--set", "train.ckpt_every=4", env=env)
    with open(part / "config.json") as f:
        assert json.load(f)["train"]["precision"] == "bf16"
    train(resumed, "--amp", "bf16", "--resume", part / "checkpoints" / "step_4.ckpt", env=env)
    assert (resumed / "checkpoints" / "step_8.ckpt").read_bytes() == (whole / "checkpoints" / "step_8.ckpt").read_bytes()
    assert losses(resumed) == losses(whole)[4:]


def test_bf16_on_a_cpu_without_it_is_refused_in_one_line(tmp_path):
    p = train(tmp_path / "r", "--amp", "bf16", env=HIDE, check=False)
    assert p.returncode == 2, p.stderr
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "train.precision bf16 on the cpu needs AVX512-BF16 or AMX-BF16" in err, err
    assert "has neither AVX512-BF16 nor AMX-BF16" in err and "use --amp off" in err, err
    assert not (tmp_path / "r").exists()
    # the mask hides only that: float32 runs as ever
    train(tmp_path / "f32", "--amp", "off", steps=2, env=HIDE)


@needs_bf16
def test_onednn_held_below_its_bf16_kernels_is_refused_too(tmp_path):
    # DNNL_MAX_CPU_ISA (oneDNN's own switch) below avx512_core_bf16: its bf16 convolutions would be emulated, slower
    # than float32, so the CPU's features alone do not make bf16 usable
    p = train(tmp_path / "r", "--amp", "bf16", env={"DNNL_MAX_CPU_ISA": "AVX512_CORE"}, check=False)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "oneDNN is limited to avx512_core" in p.stderr and "use --amp off" in p.stderr, p.stderr


# The transformer's GEMMs (issue 38, item 3): bf16 math in the Linears' products where oneDNN runs AMX kernels, float32
# elsewhere (AVX512-BF16 alone measured slower, kernels/common/cpu_gemm_bf16.h); VX_GEMM_BF16=on forces them, so the
# path is tested on any CPU with bf16. The products themselves are held to float64 in test_gemm_bf16 and
# test_backend_ops (cpu_gemm*_bf16).
VIT = ["--config", "configs/test/vit3d-tiny.json", "--device", "cpu", "--set", "output.tensorboard=0",
       "--set", "train.val_samples=0", "--set", "train.log_every=1"]


def train_vit(out, *extra, steps=8, env=None):
    return run("train", *VIT, "--steps", steps, "--threads", 2, "--deterministic", "--out", out, *extra,
               env=dict(os.environ, **(env or {})))


@needs_bf16
def test_bf16_gemms_follow_float32_within_bf16_rounding(tmp_path):
    # vit3d (not the diffusion family, whose zero-initialised output layer hides the transformer at the first steps)
    got = {}
    for name, amp, gemm in (("f32", "off", "off"), ("bf16", "bf16", "on"), ("bf16_gemm_off", "bf16", "off")):
        p = train_vit(tmp_path / name, "--amp", amp, env={"VX_GEMM_BF16": gemm})
        got[name] = losses(tmp_path / name)
        if name == "bf16":
            assert "convolutions where measured faster than float32 and in the Linears' GEMMs" in p.stdout, p.stdout
    assert len(got["f32"]) == len(got["bf16"]) == 8
    worst = max(abs(a - b) / abs(a) for a, b in zip(got["f32"], got["bf16"]))
    assert worst < LOSS_RTOL, (worst, got)  # seen 0.27%
    assert got["f32"][0] != got["bf16"][0]  # the forward itself ran in bf16
    assert got["bf16"][-1] < got["bf16"][0] / 2  # and it trains
    # the GEMMs are all a transformer has: with them in float32, --amp bf16 is float32 to the bit
    assert got["bf16_gemm_off"] == got["f32"]


@needs_bf16
def test_bf16_gemm_reruns_are_bit_for_bit_and_the_choice_is_said(tmp_path):
    for r in ("a", "b"):
        train_vit(tmp_path / r, "--amp", "bf16", steps=3, env={"VX_GEMM_BF16": "on"})
    ca, cb = (tmp_path / r / "checkpoints" / "step_3.ckpt" for r in "ab")
    assert ca.read_bytes() == cb.read_bytes()
    # as chosen: AMX runs them, AVX512-BF16 alone does not, and the line says why
    p = train_vit(tmp_path / "auto", "--amp", "bf16", steps=1, env={"VX_GEMM_BF16": ""})
    if cpu_levels()["amx"]:
        assert "and in the Linears' GEMMs" in p.stdout, p.stdout
    else:
        assert "the Linears' GEMMs stay float32: without AMX, AVX512-BF16's dot products were measured slower" \
            in p.stdout, p.stdout
    p = run("train", *VIT, "--steps", 1, "--amp", "bf16", "--out", tmp_path / "bad",
            env=dict(os.environ, VX_GEMM_BF16="yes"), check=False)
    assert p.returncode == 2 and "VX_GEMM_BF16 must be on, off or auto" in p.stderr, p.stderr
