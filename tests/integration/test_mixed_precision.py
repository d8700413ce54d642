"""test_mixed_precision.py: the device-side optimizer step, dynamic loss scaling and --compile, on the CPU.

The CPU backend computes in float32 only, but it runs the very step a GPU runs: the optimizer's decisions (clip,
skip, loss scale) are made by optim.h's code from the gradient's norm, and --compile's one-step-late readback is the
same loop. So these run everywhere (tests/integration/test_cuda.py has the GPU's bfloat16, float16 and graph tests):
  - dynamic loss scaling (train.loss_scale=dynamic, what --amp fp16 turns on): a step whose gradient is not finite
    (VX_TEST_NONFINITE_GRAD, a test-only hook standing in for a float16 overflow) is skipped, its parameters and
    moments untouched, the scale halved; growth_interval finite steps double it again; AdamW's t counts only the
    updates made; without loss scaling the same gradient ends the run (exit 4);
  - a run resumed across a skipped step is byte for byte the uninterrupted run (the scale, its growth count, t and
    the skipped count travel in the checkpoint), and a version 1 checkpoint (before that state was stored) resumes;
  - --compile on the CPU gives the eager run's losses, norms and final checkpoint bit for bit (with accumulation too);
  - --amp fp16 on the CPU, and a loss scale that is not a power of two, are refused with one line and exit 2.
"""
import os
import struct
import zlib

import pytest

from conftest import metrics, run

TINY = "configs/test/tiny.json"
HEADER = "<8sIIQQqqqqdqqqd"  # CkptHeader, version 2 (ckpt/ckpt.h)
V1_BYTES = 72


def train(out, *extra, steps=12, env=None, check=True):
    return run("train", "--config", TINY, "--steps", steps, "--out", out, "--set", "train.log_every=1",
               "--set", "output.tensorboard=0", "--set", "train.val_every=0", *extra, env=env, check=check)


def env_with(**kv):
    e = dict(os.environ)
    e.update({k: str(v) for k, v in kv.items()})
    return e


def header(path):
    b = open(path, "rb").read()
    return struct.unpack_from(HEADER, b, 0), b


def state_arrays(path):
    """The parameters and both moments of a checkpoint (bytes after its header, before the CRC)."""
    h, b = header(path)
    return b[h[2]:-4]


SCALING = ["--set", "train.loss_scale=dynamic", "--set", "train.loss_scale_init=1024",
           "--set", "train.loss_scale_growth_interval=3"]


def test_dynamic_loss_scaling_skips_the_step_and_recovers(tmp_path):
    out = tmp_path / "r"
    p = train(out, *SCALING, "--set", "train.ckpt_every=1", env=env_with(VX_TEST_NONFINITE_GRAD=4))
    m = {r["step"]: r for r in metrics(out) if "loss" in r}
    assert sorted(m) == list(range(1, 13))
    # 3 finite steps double 1024; the non-finite one halves and restarts the count; 3 more double again
    assert [m[s]["loss_scale"] for s in range(1, 13)] == [1024, 1024, 2048, 1024, 1024, 1024, 2048, 2048, 2048,
                                                           4096, 4096, 4096]
    assert [m[s]["skipped_steps"] for s in (3, 4, 12)] == [0, 1, 1]
    assert "step     4: gradient not finite: update skipped, loss scale now 1024" in p.stdout
    # nothing moved at the skipped step: parameters and both moments as after step 3
    ck = out / "checkpoints"
    assert state_arrays(ck / "step_4.ckpt") == state_arrays(ck / "step_3.ckpt")
    assert state_arrays(ck / "step_5.ckpt") != state_arrays(ck / "step_4.ckpt")
    h, _ = header(ck / "step_12.ckpt")
    step, adam_step, skipped, growth, scale = h[5], h[10], h[11], h[12], h[13]
    assert (step, adam_step, skipped, growth, scale) == (12, 11, 1, 2, 4096.0)
    assert all(m[s]["loss"] == m[s]["loss"] for s in m)  # finite losses throughout
    assert m[12]["loss"] < m[1]["loss"]


def test_a_nonfinite_gradient_without_loss_scaling_ends_the_run(tmp_path):
    p = train(tmp_path / "r", env=env_with(VX_TEST_NONFINITE_GRAD=3), check=False)
    assert p.returncode == 4, p.stderr
    assert "training diverged at step 3: the gradient norm is nan" in p.stderr


def test_resume_across_a_skipped_step_is_exact(tmp_path):
    env = env_with(VX_TEST_NONFINITE_GRAD=4)
    whole, part = tmp_path / "whole", tmp_path / "part"
    train(whole, *SCALING, env=env)
    train(part, *SCALING, "--set", "train.ckpt_every=5", env=env)
    resumed = tmp_path / "resumed"
    train(resumed, *SCALING, "--resume", part / "checkpoints" / "step_5.ckpt", env=env)
    assert (resumed / "checkpoints" / "step_12.ckpt").read_bytes() == (whole / "checkpoints" / "step_12.ckpt").read_bytes()
    a = [r for r in metrics(whole) if r.get("step", 0) > 5 and "loss" in r]
    b = [r for r in metrics(resumed) if "loss" in r]
    key = lambda r: (r["step"], r["loss"], r["grad_norm"], r["loss_scale"], r["skipped_steps"])  # noqa: E731
    assert [key(r) for r in a] == [key(r) for r in b]


def test_a_version_1_checkpoint_resumes(tmp_path):
    first = tmp_path / "first"
    train(first, steps=6)
    v2 = first / "checkpoints" / "step_6.ckpt"
    h, b = header(v2)
    magic, _, hb, count, fp, step, nxt, seed, world, ema = h[:10]
    v1 = struct.pack("<8sIIQQqqqqd", magic, 1, V1_BYTES, count, fp, step, nxt, seed, world, ema) + b[hb:-4]
    v1 += struct.pack("<I", zlib.crc32(v1) & 0xFFFFFFFF)
    old = tmp_path / "v1.ckpt"
    old.write_bytes(v1)
    out = tmp_path / "resumed"
    p = train(out, "--resume", old, steps=9)
    assert "resumed:" in p.stdout
    h, _ = header(out / "checkpoints" / "step_9.ckpt")
    assert h[1] == 2 and h[5] == 9 and h[10] == 9  # written as version 2; AdamW's t went on from the step


@pytest.mark.parametrize("accum", [1, 2])
def test_compile_on_the_cpu_is_the_eager_step(tmp_path, accum):
    eager, compiled = tmp_path / "eager", tmp_path / "compiled"
    extra = ["--set", f"train.grad_accum={accum}", "--set", "train.ckpt_every=7"]
    train(eager, *extra, steps=20)
    p = train(compiled, *extra, "--compile", steps=20)
    assert "compile: no graphs on this backend" in p.stdout
    key = lambda r: (r["step"], r["loss"], r["recon"], r["kl"], r["grad_norm"], r["lr"])  # noqa: E731
    a, b = [key(r) for r in metrics(eager) if "loss" in r], [key(r) for r in metrics(compiled) if "loss" in r]
    assert len(a) == 20 and a == b
    for step in (7, 14, 20):
        name = f"step_{step}.ckpt"
        assert (eager / "checkpoints" / name).read_bytes() == (compiled / "checkpoints" / name).read_bytes(), name


def test_fp16_on_the_cpu_is_refused(tmp_path):
    # (bf16 runs on CPUs with AVX512-BF16 or AMX and is refused elsewhere: test_cpu_bf16.py)
    p = train(tmp_path / "r", "--device", "cpu", "--amp", "fp16", check=False)
    assert p.returncode == 2
    assert "train.precision fp16 needs a GPU" in p.stderr and "--amp off" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_a_loss_scale_that_is_not_a_power_of_two_is_refused(tmp_path):
    p = train(tmp_path / "r", "--set", "train.loss_scale_init=1000", check=False)
    assert p.returncode == 2 and "must be a power of two" in p.stderr
